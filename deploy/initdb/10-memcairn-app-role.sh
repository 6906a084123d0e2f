#!/bin/sh
# Run once by the postgres image, when its data volume is first made: the role `memcairn server` connects as.
# `memcairn server migrate --app-role memcairn_app` (compose.yaml's migrate service) then grants it what the
# server needs and never changes the password it was given here (MEMCAIRN_APP_PASSWORD).
set -eu
psql -v ON_ERROR_STOP=1 -v app_password="$MEMCAIRN_APP_PASSWORD" --username "$POSTGRES_USER" \
    --dbname "$POSTGRES_DB" <<'SQL'
CREATE ROLE memcairn_app LOGIN PASSWORD :'app_password' NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
SQL
