//! pubjson-relay's connection to PostgreSQL over TCP as libpq makes it:
//! TLS (`ssl = on` with a self-signed certificate made here) and
//! SCRAM-SHA-256 authentication, the password from `PGPASSWORD`; a wrong
//! password, a connection without TLS and a certificate for another host
//! name refused with clear messages (docs/relay.md, "Connecting to
//! PostgreSQL").

use pubjson_e2e::brokers::{free_port, Nats};
use pubjson_e2e::relay::{read_jetstream, run_relay, wait_caught_up, RelayProcess};
use pubjson_e2e::{scratch_dir, ExtraCluster};
use std::process::Command;
use std::time::Duration;

const PASSWORD: &str = "s3cret 'pw'";

fn chown_postgres(path: &str) {
    let ok = Command::new("chown")
        .args(["postgres:", path])
        .status()
        .expect("chown")
        .success();
    assert!(ok, "chown {path}");
}

#[test]
fn scram_over_tls_with_verify_full() {
    let port = free_port();
    let root = pubjson_e2e::cluster_dir("relay-tls");
    let cluster = ExtraCluster::start(&root, port);
    // The server's certificate, for 127.0.0.1 only.
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("certificate");
    let cert = format!("{root}/server.crt");
    let key = format!("{root}/server.key");
    std::fs::write(&cert, certified.cert.pem()).expect("write certificate");
    std::fs::write(&key, certified.key_pair.serialize_pem()).expect("write key");
    for f in [&cert, &key] {
        chown_postgres(f);
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod key");
    cluster.append_conf(&format!(
        "listen_addresses = '127.0.0.1'\nssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\npassword_encryption = 'scram-sha-256'\n"
    ));
    // Over TCP only TLS with SCRAM; the socket stays trusted for the test.
    std::fs::write(
        format!("{}/pg_hba.conf", cluster.pgdata()),
        "local all all trust\nlocal replication all trust\n\
         hostssl all relay_tls 127.0.0.1/32 scram-sha-256\n\
         host all all 127.0.0.1/32 reject\n",
    )
    .expect("pg_hba.conf");
    cluster.restart();
    cluster.server().wait_connectable(Duration::from_secs(60));
    let mut client = cluster.connect("postgres");
    client
        .batch_execute(&format!(
            "CREATE ROLE relay_tls LOGIN REPLICATION PASSWORD '{}'",
            PASSWORD.replace('\'', "''")
        ))
        .expect("role");
    client
        .batch_execute("CREATE DATABASE relay_tls OWNER relay_tls")
        .expect("database");
    let scram: bool = client
        .query_one(
            "SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'relay_tls'",
            &[],
        )
        .expect("role")
        .get(0);
    assert!(scram, "the password is stored as SCRAM");
    let mut db = cluster.connect("relay_tls");
    db.batch_execute(
        "CREATE TABLE t (id int PRIMARY KEY, v text); ALTER TABLE t OWNER TO relay_tls;",
    )
    .expect("table");

    let dir = scratch_dir("relay-tls");
    let nats = Nats::start(&dir.join("nats"));
    let conn = |extra: &str| {
        format!(
            "host=127.0.0.1 port={port} user=relay_tls dbname=relay_tls sslrootcert={cert} {extra}"
        )
    };
    let config = |conninfo: &str| {
        format!(
            "[source]\nconninfo = \"{conninfo}\"\nslot = \"relay_tls\"\ncreate_slot = true\n[broker]\nkind = \"nats\"\n[nats]\nurl = \"{}\"\n",
            nats.url()
        )
    };
    let mut relay = RelayProcess::start(
        &dir.join("relay"),
        &config(&conn("sslmode=verify-full")),
        &[],
        &[("PGPASSWORD", PASSWORD)],
    );
    relay.wait_healthy(Duration::from_secs(60));
    db.batch_execute("INSERT INTO t SELECT g, 'tls' FROM generate_series(1, 100) g")
        .expect("insert");
    wait_caught_up(&mut client, "relay_tls", Duration::from_secs(60));
    let inserts = read_jetstream(&nats.url(), "PUBJSON")
        .iter()
        .filter(|r| r.action() == "I")
        .count();
    assert_eq!(inserts, 100);
    // The walsender's connection is encrypted.
    let ssl: bool = client
        .query_one(
            "SELECT coalesce(bool_and(s.ssl), false) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.usename = 'relay_tls' AND a.backend_type = 'walsender'",
            &[],
        )
        .expect("pg_stat_ssl")
        .get(0);
    assert!(ssl, "the relay's walsender does not use TLS");
    let log = relay.log_text();
    assert!(
        log.contains(&format!("127.0.0.1 port {port}, TLS)")),
        "{log}"
    );
    assert!(
        !log.contains("s3cret"),
        "the password reached the log:\n{log}"
    );
    relay.stop();

    // verify-ca does not check the host name: connecting as "localhost"
    // works; verify-full refuses a certificate for another name.
    let by_name =
        conn("host=localhost hostaddr=127.0.0.1 sslmode=verify-ca").replace("host=127.0.0.1 ", "");
    let mut relay = RelayProcess::start(
        &dir.join("relay-ca"),
        &config(&by_name),
        &[],
        &[("PGPASSWORD", PASSWORD)],
    );
    relay.wait_healthy(Duration::from_secs(60));
    relay.stop();
    let t = Duration::from_secs(60);
    let refused = |conninfo: &str, password: &str| {
        run_relay(
            &[
                "--source",
                conninfo,
                "--slot",
                "relay_tls",
                "--broker",
                "nats",
                "--nats-url",
                &nats.url(),
            ],
            &[("PGPASSWORD", password)],
            t,
        )
    };
    let (code, out) = refused(&by_name.replace("verify-ca", "verify-full"), PASSWORD);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("SSL connection to localhost failed") && out.contains("not valid for name"),
        "{out}"
    );
    let (code, out) = refused(&conn("sslmode=verify-full"), "wrong");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("28P01") && out.contains("password authentication failed"),
        "{out}"
    );
    let (code, out) = refused(&conn("sslmode=disable"), PASSWORD);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("28000") && out.contains("no encryption"),
        "{out}"
    );
    assert!(!out.contains("s3cret"), "{out}");
}
