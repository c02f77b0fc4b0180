//! Two streams in the [`crate::change_stream`] form compared, transaction
//! by transaction and change by change (pgoutput's against pubjson's
//! format 2 in the pgoutput differential suite; any two streams paired by
//! `pair_items` in the isolation suite).

use crate::change_stream::{show_cols, show_items, Change, Cols, Item};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub txns: usize,
    pub changes: usize,
    pub transformed: usize,
    pub messages: usize,
}

fn sorted(cols: &Cols) -> BTreeMap<String, Option<String>> {
    cols.iter().cloned().collect()
}

fn non_null(cols: &Cols) -> BTreeMap<String, Option<String>> {
    cols.iter().filter(|(_, v)| v.is_some()).cloned().collect()
}

fn compare_old(pg: &Change, pj: &Change) -> Result<(), String> {
    let pj_identity = pj.old.as_ref().map(|o| sorted(&o.cols));
    match (&pg.old, pj_identity) {
        (Some(old), Some(identity)) => {
            // 'K': key columns only (the others are NULL); 'O': the whole row.
            let expected = if old.kind == 'K' {
                non_null(&old.cols)
            } else {
                sorted(&old.cols)
            };
            if expected != identity {
                return Err(format!(
                    "old row differs: pgoutput {} tuple {:?}, pubjson identity {:?}",
                    old.kind, expected, identity
                ));
            }
            Ok(())
        }
        (Some(old), None) => Err(format!(
            "pgoutput sends an old tuple ({}) but pubjson has no identity",
            old.kind
        )),
        (None, Some(identity)) => {
            // UPDATE without an old tuple (key unchanged): pubjson's identity
            // can only repeat the new row's key values.
            let new = sorted(pg.new.as_ref().unwrap_or(&Vec::new()));
            for (k, v) in &identity {
                if new.get(k) != Some(v) {
                    return Err(format!(
                        "pgoutput sends no old tuple; pubjson identity {k}={v:?} is not the new row's value {:?}",
                        new.get(k)
                    ));
                }
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

pub fn compare_change(pg: &Change, pj: &Change) -> Result<(), String> {
    if pg.action != pj.action {
        return Err(format!(
            "action differs: pgoutput {}, pubjson {}",
            pg.action, pj.action
        ));
    }
    if pg.relation != pj.relation {
        return Err(format!(
            "relation differs: pgoutput {}, pubjson {}",
            pg.relation, pj.relation
        ));
    }
    if let Some(t) = &pj.transformed {
        if t != "U" || !matches!(pj.action, 'I' | 'D') {
            return Err(format!(
                "pubjson marks a {} as transformed from {t:?}",
                pj.action
            ));
        }
    }
    match pg.action {
        'I' | 'U' => {
            let pg_new = pg.new.clone().unwrap_or_default();
            let Some(pj_new) = &pj.new else {
                return Err("pubjson has no \"columns\"".into());
            };
            if &pg_new != pj_new {
                return Err(format!(
                    "new row differs (pgoutput leaves out unchanged TOAST {:?}):\n      pgoutput [{}]\n      pubjson  [{}]",
                    pg.unchanged,
                    show_cols(&pg_new),
                    show_cols(pj_new)
                ));
            }
            if pg.action == 'U' {
                compare_old(pg, pj)?;
            }
        }
        'D' => compare_old(pg, pj)?,
        'T' => {}
        'M' => {
            if pg.message != pj.message {
                return Err("message differs".into());
            }
        }
        a => return Err(format!("unexpected action {a}")),
    }
    Ok(())
}

/// Runs of consecutive TRUNCATE changes in relation order, so that they
/// compare as sets (plugins list them in the order they like).
fn truncates_sorted(changes: &[Change]) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    let mut run: Vec<Change> = Vec::new();
    for c in changes {
        if c.action == 'T' {
            run.push(c.clone());
        } else {
            run.sort_by(|a, b| a.relation.cmp(&b.relation));
            out.append(&mut run);
            out.push(c.clone());
        }
    }
    run.sort_by(|a, b| a.relation.cmp(&b.relation));
    out.append(&mut run);
    out
}

/// Is every transformed change of pubjson an UPDATE in the raw stream
/// (pubjson's changes, mapped to the raw change they come from, must be a
/// subsequence of the raw changes of the transaction)?
fn check_against_raw(pj: &[Change], raw: &[char]) -> Result<(), String> {
    let mut it = raw.iter();
    for c in pj {
        let wanted = match (c.action, c.transformed.is_some()) {
            ('I', false) => 'I',
            ('D', false) => 'D',
            ('U', _) | ('I', true) | ('D', true) => 'U',
            _ => continue,
        };
        if !it.any(|&r| r == wanted) {
            return Err(format!(
                "pubjson change `{c}` needs a raw {wanted} in the transaction; raw changes: {}",
                raw.iter().collect::<String>()
            ));
        }
    }
    Ok(())
}

/// [`compare_change`] of one change of each side at `at`, counted in `stats`.
fn compare_counted(
    x: &Change,
    y: &Change,
    at: &str,
    stats: &mut Stats,
    dump: &dyn Fn() -> String,
) -> Result<(), String> {
    compare_change(x, y)
        .map_err(|e| format!("{at}: {e}\n    pgoutput: {x}\n    pubjson:  {y}{}", dump()))?;
    stats.changes += 1;
    if y.action == 'M' {
        stats.messages += 1;
    }
    Ok(())
}

/// Compares the pgoutput stream with the pubjson stream, transaction by
/// transaction; `raw` (test_decoding) checks the transformed changes.
pub fn compare_streams(
    pg: &[Item],
    pj: &[Item],
    raw: Option<&HashMap<u32, Vec<char>>>,
) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let dump = || {
        format!(
            "\n--- pgoutput ---\n{}\n--- pubjson ---\n{}",
            show_items(pg, 120),
            show_items(pj, 120)
        )
    };
    if pg.len() != pj.len() {
        let xids = |items: &[Item]| {
            items
                .iter()
                .map(|i| match i {
                    Item::Txn { xid, changes } => format!("{xid}({})", changes.len()),
                    Item::Loose(_) => "loose".to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(format!(
            "pgoutput has {} transactions/items [{}], pubjson {} [{}]{}",
            pg.len(),
            xids(pg),
            pj.len(),
            xids(pj),
            dump()
        ));
    }
    for (n, (a, b)) in pg.iter().zip(pj).enumerate() {
        match pair_items(n, ("pgoutput", a), ("pubjson", b)).map_err(|e| e + &dump())? {
            Paired::Txn(xa, ca, cb) => {
                for (k, (x, y)) in ca.iter().zip(&cb).enumerate() {
                    let at = format!("transaction {xa}, change {k}");
                    compare_counted(x, y, &at, &mut stats, &dump)?;
                    if y.transformed.is_some() {
                        stats.transformed += 1;
                    }
                }
                if let Some(raw) = raw {
                    let none = Vec::new();
                    check_against_raw(&cb, raw.get(&xa).unwrap_or(&none))
                        .map_err(|e| format!("transaction {xa}: {e}{}", dump()))?;
                }
                stats.txns += 1;
            }
            Paired::Loose(x, y) => {
                let at = format!("item {n} (outside a transaction)");
                compare_counted(x, y, &at, &mut stats, &dump)?;
            }
        }
    }
    Ok(stats)
}

/// Item `n` of two streams, paired ([`pair_items`]).
pub(crate) enum Paired<'a> {
    /// Both are transaction `xid`, with as many changes: their changes,
    /// runs of TRUNCATE sorted ([`truncates_sorted`]).
    Txn(u32, Vec<Change>, Vec<Change>),
    /// Both are a change outside a transaction.
    Loose(&'a Change, &'a Change),
}

/// Pairs item `n` of stream `a_name` with item `n` of stream `b_name`: an
/// error when one is a transaction and the other not, or when the
/// transactions' xids or numbers of changes differ.
pub(crate) fn pair_items<'a>(
    n: usize,
    (a_name, a): (&str, &'a Item),
    (b_name, b): (&str, &'a Item),
) -> Result<Paired<'a>, String> {
    match (a, b) {
        (
            Item::Txn {
                xid: xa,
                changes: ca,
            },
            Item::Txn {
                xid: xb,
                changes: cb,
            },
        ) => {
            if xa != xb {
                return Err(format!(
                    "item {n}: {a_name} has transaction {xa}, {b_name} {xb}"
                ));
            }
            if ca.len() != cb.len() {
                return Err(format!(
                    "item {n}: transaction {xa}: {a_name} has {} changes, {b_name} {}",
                    ca.len(),
                    cb.len()
                ));
            }
            Ok(Paired::Txn(*xa, truncates_sorted(ca), truncates_sorted(cb)))
        }
        (Item::Loose(x), Item::Loose(y)) => Ok(Paired::Loose(x, y)),
        _ => Err(format!(
            "item {n}: a transaction on one side, a change outside a transaction on the other"
        )),
    }
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::change_stream::{cols, Old};

    fn ins(rel: &str, new: &[(&str, Option<&str>)]) -> Change {
        let mut c = Change::bare('I', rel.into());
        c.new = Some(cols(new));
        c
    }

    fn del(rel: &str, kind: char, old: &[(&str, Option<&str>)]) -> Change {
        let mut c = Change::bare('D', rel.into());
        c.old = Some(Old {
            kind,
            cols: cols(old),
        });
        c
    }

    fn txn(xid: u32, changes: Vec<Change>) -> Vec<Item> {
        vec![Item::Txn { xid, changes }]
    }

    /// The comparison has teeth: each kind of divergence is reported.
    #[test]
    fn divergences_are_caught() {
        let pg = txn(7, vec![ins("public.t", &[("id", Some("1")), ("v", None)])]);
        assert!(compare_streams(&pg, &pg.clone(), None).is_ok());
        let bad = [
            // another value, a missing or extra column, another order
            txn(7, vec![ins("public.t", &[("id", Some("2")), ("v", None)])]),
            txn(7, vec![ins("public.t", &[("id", Some("1"))])]),
            txn(
                7,
                vec![ins(
                    "public.t",
                    &[("id", Some("1")), ("v", None), ("g", Some("2"))],
                )],
            ),
            txn(7, vec![ins("public.t", &[("v", None), ("id", Some("1"))])]),
            // another relation, xid, action; an extra transaction
            txn(7, vec![ins("public.u", &[("id", Some("1")), ("v", None)])]),
            txn(8, vec![ins("public.t", &[("id", Some("1")), ("v", None)])]),
            txn(7, vec![del("public.t", 'J', &[("id", Some("1"))])]),
            [
                pg.clone(),
                txn(9, vec![ins("public.t", &[("id", Some("3")), ("v", None)])]),
            ]
            .concat(),
        ];
        for b in &bad {
            assert!(compare_streams(&pg, b, None).is_err(), "not caught: {b:?}");
        }
        // Old rows: a key tuple against the identity, a FULL tuple with NULLs.
        let pg = txn(
            7,
            vec![del("public.t", 'K', &[("id", Some("1")), ("v", None)])],
        );
        let ok = txn(7, vec![del("public.t", 'J', &[("id", Some("1"))])]);
        assert!(compare_streams(&pg, &ok, None).is_ok());
        let wrong = txn(7, vec![del("public.t", 'J', &[("id", Some("2"))])]);
        assert!(compare_streams(&pg, &wrong, None).is_err());
        let pg = txn(
            7,
            vec![del("public.t", 'O', &[("id", Some("1")), ("v", None)])],
        );
        assert!(compare_streams(&pg, &ok, None).is_err());
        // A transformed change needs a raw UPDATE.
        let pg = txn(7, vec![ins("public.t", &[("id", Some("1"))])]);
        let mut t = ins("public.t", &[("id", Some("1"))]);
        t.transformed = Some("U".into());
        let pj = txn(7, vec![t]);
        let raw_insert: HashMap<u32, Vec<char>> = [(7, vec!['I'])].into_iter().collect();
        let raw_update: HashMap<u32, Vec<char>> = [(7, vec!['U'])].into_iter().collect();
        assert!(compare_streams(&pg, &pj, Some(&raw_insert)).is_err());
        assert!(compare_streams(&pg, &pj, Some(&raw_update)).is_ok());
        assert!(compare_streams(&pg, &pg.clone(), Some(&raw_update)).is_err());
        // Truncated relations compare as a set.
        let a = txn(
            7,
            vec![
                Change::bare('T', "public.a".into()),
                Change::bare('T', "public.b".into()),
            ],
        );
        let b = txn(
            7,
            vec![
                Change::bare('T', "public.b".into()),
                Change::bare('T', "public.a".into()),
            ],
        );
        assert!(compare_streams(&a, &b, None).is_ok());
        let c = txn(7, vec![Change::bare('T', "public.a".into())]);
        assert!(compare_streams(&a, &c, None).is_err());
    }
}
