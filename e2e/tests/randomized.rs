//! Differential test on a pseudo-random workload (fixed seeds of the
//! support library's seeded generator, so every run is the same): random
//! values of many types, including text made of control characters,
//! quotes, backslashes and multi-byte characters, random
//! INSERT/UPDATE/DELETE mixes, savepoints, messages and TOAST.

use postgres::types::ToSql;
use pubjson_e2e::{case, option_matrix, require_wal2json, SeededRng, TestDb};

/// Text made of the characters JSON escaping cares about (quotes,
/// backslashes, controls, multi-byte and special Unicode characters).
fn text(rng: &mut SeededRng, max_len: u64) -> String {
    const POOL: &[char] = &[
        'a', 'b', 'Z', '0', '9', ' ', '"', '\\', '/', '\'', '{', '}', '[', ']', ',', ':', '\n',
        '\r', '\t', '\u{1}', '\u{8}', '\u{c}', '\u{1f}', '\u{7f}', 'é', 'ß', '日', '本', '😀',
        '\u{2028}', '\u{2029}', '\u{feff}', '\u{80}', '\u{ffff}', '<', '>', '&', '%', 'u',
    ];
    let len = rng.below(max_len + 1);
    (0..len).map(|_| *rng.pick(POOL)).collect()
}

/// Special values and extremes as often as ordinary numbers.
fn float(rng: &mut SeededRng) -> f64 {
    match rng.below(12) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -0.0,
        4 => f64::MIN_POSITIVE,
        5 => f64::MAX,
        6 => 5e-324,
        _ => {
            (rng.next_u64() as i64 as f64) / (rng.below(1_000_000) + 1) as f64
                * 10f64.powi(rng.below(40) as i32 - 20)
        }
    }
}

/// numeric text: NaN, infinities, trailing zeros, up to 19 integer digits.
fn numeric(rng: &mut SeededRng) -> String {
    match rng.below(8) {
        0 => "NaN".into(),
        1 => "Infinity".into(),
        2 => "-Infinity".into(),
        3 => format!("{}.{}", rng.next_u64(), "0".repeat(rng.below(20) as usize)),
        _ => {
            let int = rng.next_u64() % 10u64.pow(rng.below(19) as u32 + 1);
            let frac = rng.next_u64() % 1_000_000;
            let sign = if rng.chance(30) { "-" } else { "" };
            format!("{sign}{int}.{frac:06}")
        }
    }
}

const COLUMNS: &str = "id, i2, i8, f4, f8, n, b, tx, vc, by, ts, j, ia, ta, big";

/// NULL (`None`) 15% of the time, else `Some` of a value drawn after the
/// coin toss.
fn maybe<T>(rng: &mut SeededRng, value: impl FnOnce(&mut SeededRng) -> T) -> Option<T> {
    if rng.chance(15) {
        None
    } else {
        Some(value(rng))
    }
}

fn random_row(rng: &mut SeededRng, id: i32) -> Vec<Box<dyn ToSql + Sync>> {
    let null = |rng: &mut SeededRng| rng.chance(15);
    let mut v: Vec<Box<dyn ToSql + Sync>> = vec![Box::new(id)];
    v.push(Box::new(maybe(rng, |rng| rng.next_u64() as i16)));
    v.push(Box::new(maybe(rng, |rng| rng.next_u64() as i64)));
    v.push(Box::new(maybe(rng, |rng| float(rng) as f32)));
    v.push(Box::new(maybe(rng, float)));
    v.push(Box::new(maybe(rng, numeric)));
    v.push(Box::new(maybe(rng, |rng| rng.chance(50))));
    v.push(Box::new(maybe(rng, |rng| text(rng, 40))));
    v.push(Box::new(maybe(rng, |rng| text(rng, 10))));
    v.push(Box::new(maybe(rng, |rng| {
        (0..rng.below(20))
            .map(|_| rng.next_u64() as u8)
            .collect::<Vec<u8>>()
    })));
    v.push(Box::new(maybe(rng, |rng| {
        format!(
            "20{:02}-0{}-1{} 0{}:30:00.{}",
            rng.below(99),
            rng.below(9) + 1,
            rng.below(9),
            rng.below(9),
            rng.below(1_000_000)
        )
    })));
    v.push(Box::new(maybe(rng, |rng| {
        serde_json::json!({ "k": text(rng, 8), "n": rng.below(1000), "a": [rng.chance(50), null] })
            .to_string()
    })));
    v.push(Box::new(maybe(rng, |rng| {
        (0..rng.below(4))
            .map(|_| rng.next_u64() as i32)
            .collect::<Vec<i32>>()
    })));
    v.push(Box::new(maybe(rng, |rng| {
        (0..rng.below(4))
            .map(|_| {
                if rng.chance(20) {
                    None
                } else {
                    Some(text(rng, 6))
                }
            })
            .collect::<Vec<Option<String>>>()
    })));
    // Sometimes large enough to be TOASTed (out of line).
    v.push(Box::new(if rng.chance(10) {
        Some(
            (0..3000)
                .map(|i| format!("{:x}", (rng.next_u64() >> 8) ^ i))
                .collect::<String>(),
        )
    } else if null(rng) {
        None
    } else {
        Some(text(rng, 20))
    }));
    v
}

fn run_random_workload(db: &mut TestDb, seed: u64, transactions: usize, first_id: i32) {
    let mut rng = SeededRng::new(seed);
    let mut next_id = first_id;
    let mut live: Vec<(&str, i32)> = Vec::new();
    let placeholders = (1..=15).map(|i| match i {
        6 => "$6::text::numeric".to_string(),
        11 => "$11::text::timestamp".to_string(),
        12 => "$12::text::jsonb".to_string(),
        _ => format!("${i}"),
    });
    let placeholders = placeholders.collect::<Vec<_>>().join(", ");
    for _ in 0..transactions {
        let mut tx = db.conn.client.transaction().expect("begin");
        let first_new_id = next_id;
        for _ in 0..=rng.below(4) {
            let table = *rng.pick(&["e2e_random.pk", "e2e_random.full"]);
            match rng.below(10) {
                0..=4 => {
                    let row = random_row(&mut rng, next_id);
                    let params: Vec<&(dyn ToSql + Sync)> = row.iter().map(|b| b.as_ref()).collect();
                    tx.execute(
                        &format!("insert into {table} ({COLUMNS}) values ({placeholders})"),
                        &params,
                    )
                    .expect("insert");
                    live.push((table, next_id));
                    next_id += 1;
                }
                5..=7 if !live.is_empty() => {
                    let (table, id) = *rng.pick(&live);
                    let row = random_row(&mut rng, id);
                    let col = rng.below(14) as usize + 1;
                    let name = COLUMNS.split(", ").nth(col).unwrap_or("tx");
                    let cast = match col {
                        5 => "::text::numeric",
                        10 => "::text::timestamp",
                        11 => "::text::jsonb",
                        _ => "",
                    };
                    tx.execute(
                        &format!("update {table} set {name} = $1{cast} where id = $2"),
                        &[row[col].as_ref(), &id],
                    )
                    .expect("update");
                }
                8 if !live.is_empty() => {
                    let i = rng.below(live.len() as u64) as usize;
                    let (table, id) = live.remove(i);
                    tx.execute(&format!("delete from {table} where id = $1"), &[&id])
                        .expect("delete");
                }
                _ => {
                    // Transactional only: after a transaction with several
                    // changes wal2json 2.5 prints a stray comma before a
                    // non-transactional one (see caveats.rs).
                    tx.execute(
                        "select pg_logical_emit_message(true, $1, $2)",
                        &[&text(&mut rng, 5), &text(&mut rng, 30)],
                    )
                    .expect("message");
                }
            }
        }
        if rng.chance(10) {
            tx.rollback().expect("rollback");
            live.retain(|(_, id)| *id < first_new_id);
        } else {
            tx.commit().expect("commit");
        }
    }
}

#[test]
fn random_workloads() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair("random", "create table e2e_random.pk (id int primary key, i2 int2, i8 int8, f4 float4, f8 float8, n numeric, b bool,
                                     tx text, vc varchar(10), by bytea, ts timestamp, j jsonb, ia int[], ta text[], big text);
         create table e2e_random.full (like e2e_random.pk);
         alter table e2e_random.full replica identity full;");
    for (i, seed) in [0x5eed_0001_u64, 0xdead_beef, 42].into_iter().enumerate() {
        run_random_workload(&mut db, seed, 60, 100_000 * i as i32 + 1);
    }
    let mut cases = option_matrix()
        .into_iter()
        .filter(|c| {
            [
                "defaults",
                "pretty-print",
                "write-in-chunks",
                "many options",
                "include-pk",
                "include-transaction=0",
            ]
            .iter()
            .any(|k| c.label.contains(k))
        })
        .collect::<Vec<_>>();
    cases.push(case(
        "v1 include-pk (insert,update; pk table)",
        &[
            ("include-pk", "1"),
            ("actions", "insert,update"),
            ("add-tables", "e2e_random.pk"),
        ],
    ));
    db.compare_all(&slots, &cases);
}
