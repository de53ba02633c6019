-- bench/wrk_post.lua: make wrk send what the relay sends.  The body and
-- headers are read from the file named by BENCH_REQUEST (written by
-- run.sh from a real event): the first line is the body, each further
-- line a "name: value" header.
local f = assert(io.open(os.getenv("BENCH_REQUEST"), "r"))
local body = f:read("*l")
local headers = {}
for line in f:lines() do
    local name, value = line:match("^([^:]+):%s*(.*)$")
    if name then
        headers[name] = value
    end
end
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers = headers
