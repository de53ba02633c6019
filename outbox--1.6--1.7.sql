-- outbox 1.6 -> 1.7.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.7'" to load this file. \quit

-- Objects are changed in place (CREATE OR REPLACE, ALTER); nothing an
-- administrator may have granted on is dropped, so grants and initial
-- privileges stay as they are.
