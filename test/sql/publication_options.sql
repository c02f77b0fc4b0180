-- wal2json's table options narrow what publications publish, whichever
-- path a change takes: published as itself (no slot), through a row filter,
-- or through a partition root.
SET client_min_messages = warning;
CREATE TABLE po_plain (id int PRIMARY KEY);
CREATE TABLE po_other (id int PRIMARY KEY);
CREATE TABLE po_filtered (id int PRIMARY KEY);
CREATE TABLE po_root (id int PRIMARY KEY) PARTITION BY RANGE (id);
CREATE TABLE po_leaf PARTITION OF po_root FOR VALUES FROM (0) TO (100);
CREATE PUBLICATION po_pub FOR TABLE po_plain, po_other, po_filtered WHERE (id > 0);
CREATE PUBLICATION po_root_pub FOR TABLE po_root WITH (publish_via_partition_root);
SELECT 'init' FROM pg_create_logical_replication_slot('regress_pubopts', 'pubjson');

INSERT INTO po_plain VALUES (1);
INSERT INTO po_other VALUES (2);
INSERT INTO po_filtered VALUES (3), (-3);
INSERT INTO po_root VALUES (4);

-- Everything the publications publish.
SELECT data FROM pg_logical_slot_peek_changes('regress_pubopts', NULL, NULL, 'format-version', '2', 'include-types', '0', 'publication_names', 'po_pub,po_root_pub');
-- filter-tables removes a table published as itself, a row-filtered one
-- and a partition root (the emitted name).
SELECT data FROM pg_logical_slot_peek_changes('regress_pubopts', NULL, NULL, 'format-version', '2', 'include-types', '0', 'publication_names', 'po_pub,po_root_pub', 'filter-tables', 'public.po_other,public.po_filtered,public.po_root');
-- add-tables keeps only the tables it names.
SELECT data FROM pg_logical_slot_peek_changes('regress_pubopts', NULL, NULL, 'format-version', '2', 'include-types', '0', 'publication_names', 'po_pub,po_root_pub', 'add-tables', 'public.po_other');

SELECT 'stop' FROM pg_drop_replication_slot('regress_pubopts');
DROP PUBLICATION po_pub, po_root_pub;
DROP TABLE po_plain, po_other, po_filtered, po_root;
