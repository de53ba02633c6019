-- outbox 1.4 -> 1.5.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.5'" to load this file. \quit

-- Endpoint URLs may name a Kafka cluster and topic (the Kafka target), or
-- NATS servers and a JetStream subject (the NATS target).
COMMENT ON FUNCTION outbox._check_url(text) IS 'internal: validate an endpoint URL (http, https, kafka or nats), return it normalized';
