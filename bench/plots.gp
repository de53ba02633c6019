# bench/plots.gp: the plots of a benchmark run, drawn by report.py as
#     gnuplot -e "dir='WORK'; out='BENCH'" plots.gp
# from dir/emit.dat, dir/relay.dat and dir/latency.dat into out/*.png.

set terminal pngcairo size 900,500 font "sans,10"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right
set yrange [0:*]

set output out.'/emit.png'
set title "Case 1: emit cost (pgbench, 4 clients, prepared), transactions/s"
set ylabel "transactions/s"
plot dir.'/emit.dat' using 2:xtic(1) title "synchronous_commit=off" lc rgb "#4472c4", \
     '' using 3 title "synchronous_commit=on" lc rgb "#ed7d31"

set output out.'/relay.png'
set title "Relay deliveries/s: each case against its baseline from the same run"
set ylabel "deliveries/s (log scale)"
set logscale y
set yrange [100:*]
set xtics font ",8"
plot dir.'/relay.dat' using 2:xtic(1) title "case" lc rgb "#4472c4", \
     '' using 3 title "baseline" lc rgb "#a5a5a5"
unset logscale y
set yrange [0:*]

set output out.'/latency.png'
set title "Case 3: commit-to-arrival latency, 1,000 events/s (CDF)"
set style data lines
set xlabel "milliseconds (log scale)"
set ylabel "fraction of events"
set logscale x
set xrange [0.1:*]
set yrange [0:1]
set key bottom right
set arrow from 5, graph 0 to 5, graph 1 nohead dt 2 lc rgb "#70ad47"
set arrow from 50, graph 0 to 50, graph 1 nohead dt 2 lc rgb "#c00000"
plot dir.'/latency.dat' using (($1 > 0.1) ? $1 : 0.1):2 title "outbox relay → nginx" lw 2 lc rgb "#4472c4", \
     NaN title "targets: p50 < 5 ms, p99 < 50 ms" dt 2 lc rgb "#70ad47"
