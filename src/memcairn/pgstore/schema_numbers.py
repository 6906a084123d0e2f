"""Migrations 12 and 13: the API's ids counted within each tenant (``pgstore/item_numbers.py`` reads them)."""

from __future__ import annotations

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"  # as the other owner's functions

# Per-tenant numbers (the API's ids): ids from one sequence over every tenant told a tenant how much the others
# stored between two of its own. ``items.number`` counts a tenant's memories (1, 2, 3 ...) and ``changes.number`` its
# stored and forgotten changes (the SSE feed's event ids; the vectors' changes take none), each from a sequence of
# the tenant's own in the schema ``memcairn_numbers``, which only the owner may use (the application role cannot
# read another tenant's count from it). Sequences, not a counter row: taking a number locks nothing, so one
# tenant's writes never wait for each other (a counter row stays locked until its transaction ends), and, as
# with any sequence, a number taken by a write that stored nothing (a duplicate, a rollback) is skipped. The
# owner's trigger functions take them; a new tenant gets its sequences when its row is inserted. Existing rows are
# numbered in id (sequence) order and every row is kept.
M012 = f"""
CREATE SCHEMA memcairn_numbers;
REVOKE ALL ON SCHEMA memcairn_numbers FROM PUBLIC;

CREATE FUNCTION memcairn_tenant_sequences(tenant bigint, items bigint, changes bigint) RETURNS void
  LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  EXECUTE format('CREATE SEQUENCE memcairn_numbers.items_%s AS bigint', tenant);
  EXECUTE format('CREATE SEQUENCE memcairn_numbers.changes_%s AS bigint', tenant);
  IF items > 0 THEN
    PERFORM setval(format('memcairn_numbers.items_%s', tenant)::regclass, items);
  END IF;
  IF changes > 0 THEN
    PERFORM setval(format('memcairn_numbers.changes_%s', tenant)::regclass, changes);
  END IF;
END $$;
CREATE FUNCTION memcairn_new_tenant() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  PERFORM public.memcairn_tenant_sequences(NEW.id, 0, 0);
  RETURN NEW;
END $$;
CREATE FUNCTION memcairn_number_item() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  NEW.number := nextval(format('memcairn_numbers.items_%s', NEW.tenant_id)::regclass);
  RETURN NEW;
END $$;
CREATE FUNCTION memcairn_number_change() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  NEW.number := nextval(format('memcairn_numbers.changes_%s', NEW.tenant_id)::regclass);
  RETURN NEW;
END $$;
REVOKE EXECUTE ON FUNCTION memcairn_tenant_sequences(bigint, bigint, bigint), memcairn_new_tenant(),
  memcairn_number_item(), memcairn_number_change() FROM PUBLIC;

ALTER TABLE items NO FORCE ROW LEVEL SECURITY;
ALTER TABLE changes NO FORCE ROW LEVEL SECURITY;
ALTER TABLE items ADD COLUMN number bigint;
UPDATE items i SET number = r.n
  FROM (SELECT id, row_number() OVER (PARTITION BY tenant_id ORDER BY id) AS n FROM items) r WHERE r.id = i.id;
ALTER TABLE items ALTER COLUMN number SET NOT NULL;
ALTER TABLE items ADD CONSTRAINT items_tenant_number UNIQUE (tenant_id, number);
ALTER TABLE changes ADD COLUMN number bigint, ADD COLUMN item_number bigint;
UPDATE changes c SET number = r.n
  FROM (SELECT seq, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS n FROM changes
        WHERE op <> 'embedded') r WHERE r.seq = c.seq;
UPDATE changes c SET item_number = i.number FROM items i WHERE i.id = c.item_id AND i.tenant_id = c.tenant_id;
CREATE UNIQUE INDEX changes_tenant_number ON changes (tenant_id, number);
SELECT memcairn_tenant_sequences(t.id, coalesce((SELECT max(i.number) FROM items i WHERE i.tenant_id = t.id), 0),
  coalesce((SELECT max(c.number) FROM changes c WHERE c.tenant_id = t.id), 0)) FROM tenants t;
ALTER TABLE items FORCE ROW LEVEL SECURITY;
ALTER TABLE changes FORCE ROW LEVEL SECURITY;

CREATE TRIGGER tenants_sequences AFTER INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION memcairn_new_tenant();
CREATE TRIGGER items_number BEFORE INSERT ON items FOR EACH ROW EXECUTE FUNCTION memcairn_number_item();
CREATE TRIGGER changes_number BEFORE INSERT ON changes FOR EACH ROW WHEN (NEW.op <> 'embedded')
  EXECUTE FUNCTION memcairn_number_change();
"""

# The audit log's entries go by a per-tenant number too (``audit_log.number``, the ``id`` and ``before`` cursor of
# ``GET /v1/audit``): every read writes an audit row, so the ids of one sequence showed a tenant's admin how many
# requests every other tenant made. Same scheme as migration 12: a sequence of the tenant's own in
# ``memcairn_numbers``, taken by the owner's trigger; a new tenant gets it with the others.
# A row that comes with its number (a tenant's rows put back from a dump: docs/OPERATIONS.md) keeps it, and its
# sequence moves past it; a tenant row put back whose sequences exist keeps them (``IF NOT EXISTS``).
M013 = f"""
CREATE OR REPLACE FUNCTION memcairn_tenant_sequences(tenant bigint, items bigint, changes bigint) RETURNS void
  LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  EXECUTE format('CREATE SEQUENCE IF NOT EXISTS memcairn_numbers.items_%s AS bigint', tenant);
  EXECUTE format('CREATE SEQUENCE IF NOT EXISTS memcairn_numbers.changes_%s AS bigint', tenant);
  EXECUTE format('CREATE SEQUENCE IF NOT EXISTS memcairn_numbers.audit_%s AS bigint', tenant);
  IF items > 0 THEN
    PERFORM setval(format('memcairn_numbers.items_%s', tenant)::regclass, items);
  END IF;
  IF changes > 0 THEN
    PERFORM setval(format('memcairn_numbers.changes_%s', tenant)::regclass, changes);
  END IF;
END $$;
CREATE FUNCTION memcairn_take_number(seq text, given bigint) RETURNS bigint LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
  last bigint;
  called boolean;
BEGIN
  IF given IS NULL THEN
    RETURN nextval(seq::regclass);
  END IF;
  EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO last, called;
  IF given > last OR NOT called THEN
    PERFORM setval(seq::regclass, greatest(given, last));
  END IF;
  RETURN given;
END $$;
CREATE OR REPLACE FUNCTION memcairn_number_item() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  NEW.number := public.memcairn_take_number(format('memcairn_numbers.items_%s', NEW.tenant_id), NEW.number);
  RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION memcairn_number_change() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  NEW.number := public.memcairn_take_number(format('memcairn_numbers.changes_%s', NEW.tenant_id), NEW.number);
  RETURN NEW;
END $$;
CREATE FUNCTION memcairn_number_audit() RETURNS trigger LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
  NEW.number := public.memcairn_take_number(format('memcairn_numbers.audit_%s', NEW.tenant_id), NEW.number);
  RETURN NEW;
END $$;
REVOKE EXECUTE ON FUNCTION memcairn_take_number(text, bigint), memcairn_number_audit() FROM PUBLIC;

ALTER TABLE audit_log NO FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_log ADD COLUMN number bigint;
UPDATE audit_log a SET number = r.n
  FROM (SELECT tenant_id, id, row_number() OVER (PARTITION BY tenant_id ORDER BY id) AS n FROM audit_log) r
  WHERE r.tenant_id = a.tenant_id AND r.id = a.id;
ALTER TABLE audit_log ALTER COLUMN number SET NOT NULL;
CREATE UNIQUE INDEX audit_log_tenant_number ON audit_log (tenant_id, number);
SELECT memcairn_tenant_sequences(t.id, 0, 0),
  setval(format('memcairn_numbers.audit_%s', t.id)::regclass, greatest(n.last, 1), n.last > 0)
  FROM tenants t, LATERAL (SELECT coalesce(max(a.number), 0) AS last FROM audit_log a WHERE a.tenant_id = t.id) n;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE TRIGGER audit_log_number BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION memcairn_number_audit();
"""
