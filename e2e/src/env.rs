//! The environment the suites run in: the test cluster's variables
//! (`eval "$(scripts/cluster.sh env)"`), the server's programs and the
//! directories tests may write to.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A variable the suites cannot run without.
pub(crate) fn required_var(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "environment variable {name} is not set. The end-to-end tests need the test cluster: \
             run `scripts/cluster.sh start && eval \"$(scripts/cluster.sh env)\"` first \
             (it exports PGHOST, PGPORT, PGUSER and PUBJSON_PG_BIN)"
        ),
    }
}

pub(crate) fn optional_var(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// Where the test cluster is, from the environment.
#[derive(Debug, Clone)]
pub struct PgEnv {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// The database the wal2json differential tests run in (created if
    /// missing).
    pub dbname: String,
    /// The database connected to to create it.
    pub maintenance_db: String,
}

/// PGHOST, PGPORT and PGUSER are required. The differential tests run in
/// their own database, `$PUBJSON_E2E_DATABASE` (default `pubjson_e2e`),
/// created through `$PGDATABASE` (default `postgres`): a logical slot
/// decodes only its database, so other users of the cluster do not show up
/// in the decoded streams.
pub fn pg_env() -> PgEnv {
    let port = required_var("PGPORT");
    PgEnv {
        host: required_var("PGHOST"),
        port: port
            .parse()
            .unwrap_or_else(|_| panic!("PGPORT={port:?} is not a port number")),
        user: required_var("PGUSER"),
        dbname: optional_var("PUBJSON_E2E_DATABASE", "pubjson_e2e"),
        maintenance_db: optional_var("PGDATABASE", "postgres"),
    }
}

/// The server's programs: `$PUBJSON_PG_BIN`.
pub fn pg_bin_dir() -> PathBuf {
    PathBuf::from(required_var("PUBJSON_PG_BIN"))
}

/// `$PUBJSON_PG_BIN/<program>` (pg_recvlogical, pg_ctl, pg_basebackup...).
pub fn pg_bin(program: &str) -> PathBuf {
    let path = pg_bin_dir().join(program);
    assert!(
        path.exists(),
        "{} does not exist (check PUBJSON_PG_BIN)",
        path.display()
    );
    path
}

/// The programs of PostgreSQL `major` where scripts/pg-env.sh finds them:
/// Debian's for 15, `$PUBJSON_PG_CACHE/pgNN/bin` (default cache
/// `/var/cache/pubjson`) for 16-18. For tests that need another major
/// beside the server under test (`$PUBJSON_PG_BIN`), such as pg_upgrade's
/// old cluster; the directory may be missing.
pub fn pg_bin_dir_of(major: u32) -> PathBuf {
    if major == 15 {
        return PathBuf::from("/usr/lib/postgresql/15/bin");
    }
    PathBuf::from(optional_var("PUBJSON_PG_CACHE", "/var/cache/pubjson"))
        .join(format!("pg{major}"))
        .join("bin")
}

/// The major version of the PostgreSQL whose programs are in `bin`, from
/// `pg_config --version` ("PostgreSQL 18.6"); None when there is none.
pub fn major_of(bin: &Path) -> Option<u32> {
    let out = Command::new(bin.join("pg_config"))
        .arg("--version")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.trim().strip_prefix("PostgreSQL ")?;
    let digits: String = version.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What is missing for pubjson `versions` in the PostgreSQL tree of `bin`
/// (the library in `pg_config --pkglibdir`, the control file and each
/// version's install script in `--sharedir`/extension, as
/// scripts/install.sh puts them there); None when nothing is.
pub fn pubjson_missing_from(bin: &Path, versions: &[&str]) -> Option<String> {
    let dir = |option: &str| -> Result<PathBuf, String> {
        let pg_config = bin.join("pg_config");
        let out = Command::new(&pg_config)
            .arg(option)
            .output()
            .map_err(|e| format!("{}: {e}", pg_config.display()))?;
        if !out.status.success() {
            return Err(format!("{} {option} failed", pg_config.display()));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let (libdir, sharedir) = match (dir("--pkglibdir"), dir("--sharedir")) {
        (Ok(lib), Ok(share)) => (lib, share.join("extension")),
        (Err(e), _) | (_, Err(e)) => return Some(e),
    };
    let mut needed = vec![libdir.join("pubjson.so"), sharedir.join("pubjson.control")];
    needed.extend(
        versions
            .iter()
            .map(|v| sharedir.join(format!("pubjson--{v}.sql"))),
    );
    let missing: Vec<String> = needed
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    (!missing.is_empty()).then(|| format!("missing {}", missing.join(", ")))
}

/// `$PUBJSON_TMP` (default `/tmp`): every cluster and scratch file of a
/// run lives below it, so that concurrent runs with their own value do not
/// meet.
pub fn tmp_root() -> PathBuf {
    PathBuf::from(optional_var("PUBJSON_TMP", "/tmp"))
}

/// Where a test's own cluster lives: `$PUBJSON_TMP/pubjson-<name>`.
pub fn cluster_dir(name: &str) -> String {
    format!("{}/pubjson-{name}", tmp_root().display())
}

/// A fresh, empty directory for a test's files,
/// `$PUBJSON_TMP/pubjson-e2e-<name>`: emptied when the test next runs, so
/// that what a failed run left can be looked at until then and runs do not
/// pile up directories.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = tmp_root().join(format!("pubjson-e2e-{name}"));
    fresh_dir(&dir);
    dir
}

/// Empties `dir` (creating it if needed).
pub fn fresh_dir(dir: &std::path::Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)
        .unwrap_or_else(|e| panic!("create directory {}: {e}", dir.display()));
}

/// `PUBJSON_SOAK=1`: the long variants of the reliability tests.
pub fn soak() -> bool {
    std::env::var("PUBJSON_SOAK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `PUBJSON_E2E_BATCH_BYTES=N`: format 3's `batch-bytes` for the suites
/// that decode format 3 through pg_recvlogical and format3.rs's SQL reads
/// (scripts/test.sh runs them again with 0 and 300; without it the
/// default, 64 kB batches, applies).
pub fn format3_batch_bytes() -> Option<String> {
    std::env::var("PUBJSON_E2E_BATCH_BYTES")
        .ok()
        .filter(|v| !v.is_empty())
}

/// `suite::test` of the running test, for [`note_skip`]: the test harness
/// names each test's thread after the test, and a suite's tests are at the
/// top of its crate (`module` is the caller's `module_path!()`).
#[doc(hidden)]
pub fn current_test(module: &str) -> String {
    let thread = std::thread::current();
    format!("{module}::{}", thread.name().unwrap_or("?"))
}

/// First check of a test that needs PostgreSQL `$needed` or later: returns
/// early, noting the skip with `$why`, when `$major` (the server's major
/// version) is older.
#[macro_export]
macro_rules! require_major {
    ($major:expr, $needed:expr, $why:expr) => {
        if $major < $needed {
            $crate::note_skip(&$crate::env::current_test(module_path!()), $why);
            return;
        }
    };
}

/// Records a test that skipped its checks: on stderr and, when
/// `PUBJSON_SKIP_LOG` names a file, there (scripts/test.sh counts them).
pub fn note_skip(test: &str, reason: &str) {
    eprintln!("SKIPPED {test}: {reason}");
    if let Ok(path) = std::env::var("PUBJSON_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let major = std::env::var("PG_MAJOR").unwrap_or_else(|_| "?".into());
            let _ = writeln!(f, "PostgreSQL {major}: {test}: {reason}");
        }
    }
}
