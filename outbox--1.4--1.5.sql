-- outbox 1.4 -> 1.5.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.5'" to load this file. \quit
