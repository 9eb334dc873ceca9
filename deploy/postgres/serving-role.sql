-- The PostgreSQL role serving replicas log in as: they read the registry's servable versions and
-- write only their own heartbeat. Run it as the tables' owner after migrations, and again after any
-- migration that adds a table serving reads (it is idempotent):
--   psql -v ON_ERROR_STOP=1 -v serving_password="$SERVING_DB_PASSWORD" -f serving-role.sql
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'portico_serving') THEN
        CREATE ROLE portico_serving LOGIN;
    END IF;
END
$$;
ALTER ROLE portico_serving WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'serving_password';

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM portico_serving;
GRANT USAGE ON SCHEMA public TO portico_serving;
-- What serving reads: the revision it watches, and each servable version with its files (and,
-- for a version whose GPU check is pending, its model's golden requests).
GRANT SELECT ON repository_servingrevision, repository_model, repository_modelversion,
    repository_versionfile, repository_blob, repository_goldenrequest TO portico_serving;
-- The token table it checks inference requests against (hashes only: no key can be read back),
-- and of each token's user only whether it is active and a superuser, with its group names (which
-- cap a non-invoker token's role). Never a password hash.
GRANT SELECT ON repository_apitoken, auth_group, auth_user_groups TO portico_serving;
GRANT SELECT (id, is_active, is_superuser) ON auth_user TO portico_serving;
-- Its only writes: the heartbeat row of each replica, and when it last saw each token.
GRANT SELECT, INSERT, UPDATE ON repository_servingreplica TO portico_serving;
GRANT UPDATE (last_used) ON repository_apitoken TO portico_serving;
