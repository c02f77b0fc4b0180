//! Readers of test_decoding's rows: the raw change sequence per
//! transaction (used to check that every change pubjson marks
//! `"transformedfrom":"U"` comes from an UPDATE), and whole rows with
//! their values in the [`crate::change_stream`] form.

use crate::change_stream::{push_change, Change, Cols, Item, Message, Old};
use crate::truncate;
use std::collections::HashMap;

// ---------------------------------------------------------------------------
// test_decoding: the raw change sequence per transaction
// ---------------------------------------------------------------------------

/// xid → raw change letters (I, U, D) of that transaction.
pub fn read_test_decoding(rows: &[String]) -> Result<HashMap<u32, Vec<char>>, String> {
    let mut out = HashMap::new();
    let mut open: Option<(u32, Vec<char>)> = None;
    for row in rows {
        if let Some(x) = row.strip_prefix("BEGIN ") {
            let xid = x.trim().parse::<u32>().map_err(|e| format!("{row}: {e}"))?;
            open = Some((xid, Vec::new()));
        } else if row.starts_with("COMMIT") {
            if let Some((xid, changes)) = open.take() {
                out.insert(xid, changes);
            }
        } else if let Some(rest) = row.strip_prefix("table ") {
            let idx = rest
                .find(": ")
                .ok_or_else(|| format!("unexpected test_decoding row {row}"))?;
            let action = rest[idx + 2..].split(':').next().unwrap_or("");
            let letter = match action {
                "INSERT" => 'I',
                "UPDATE" => 'U',
                "DELETE" => 'D',
                "TRUNCATE" => 'T',
                other => return Err(format!("unexpected test_decoding action {other}")),
            };
            if let Some((_, changes)) = open.as_mut() {
                changes.push(letter);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// test_decoding: whole rows, values kept
// ---------------------------------------------------------------------------

/// What follows an opening `quote` up to the closing one (a doubled
/// `quote` stands for one), and the rest after it; `None` when it is not
/// closed.
fn unquote(rest: &str, quote: char) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, ch)) = chars.next() {
        if ch != quote {
            out.push(ch);
        } else if rest[i + 1..].starts_with(quote) {
            out.push(quote);
            chars.next();
        } else {
            return Some((out, &rest[i + 1..]));
        }
    }
    None
}

/// An identifier as `quote_identifier` prints it (`"..."` with `""`
/// doubled, or bare up to one of `stops`); returns it and the rest.
fn td_ident<'a>(s: &'a str, stops: &[char]) -> Result<(String, &'a str), String> {
    if let Some(rest) = s.strip_prefix('"') {
        unquote(rest, '"').ok_or_else(|| format!("unterminated quoted identifier in {s:?}"))
    } else {
        let end = s.find(stops).unwrap_or(s.len());
        if end == 0 {
            return Err(format!("identifier expected at {s:?}"));
        }
        Ok((s[..end].to_string(), &s[end..]))
    }
}

/// `schema.table` as test_decoding prints it (quote_qualified_identifier).
fn td_relation(s: &str) -> Result<(String, &str), String> {
    let (schema, rest) = td_ident(s, &['.'])?;
    let rest = rest
        .strip_prefix('.')
        .ok_or_else(|| format!("'.' expected at {rest:?}"))?;
    let (table, rest) = td_ident(rest, &[':', ',', ' '])?;
    Ok((format!("{schema}.{table}"), rest))
}

/// One value of a tuple: `None` for null, `Some(None)` for an unchanged
/// TOAST datum, else its PostgreSQL text; returns the rest.
#[allow(clippy::type_complexity)]
fn td_value<'a>(s: &'a str, type_name: &str) -> Result<(Option<Option<String>>, &'a str), String> {
    let token_end = |s: &str| s.find(' ').unwrap_or(s.len());
    if let Some(rest) = s.strip_prefix('\'').or_else(|| s.strip_prefix("B'")) {
        let (text, rest) =
            unquote(rest, '\'').ok_or_else(|| format!("unterminated literal in {s:?}"))?;
        return Ok((Some(Some(text)), rest));
    }
    let end = token_end(s);
    let token = &s[..end];
    let value = match token {
        "null" => Some(None),
        "unchanged-toast-datum" => None,
        "true" if type_name == "boolean" => Some(Some("t".to_string())),
        "false" if type_name == "boolean" => Some(Some("f".to_string())),
        t if !t.is_empty() => Some(Some(t.to_string())),
        _ => return Err(format!("value expected at {s:?}")),
    };
    Ok((value, &s[end..]))
}

/// The new row of an INSERT or UPDATE from `body`, a tuple or
/// ` (no-tuple-data)` (then `c` has none).
fn td_new_row(c: &mut Change, body: &str) -> Result<(), String> {
    if body != " (no-tuple-data)" {
        let (cols, unchanged, _) = td_tuple(body)?;
        c.new = Some(cols);
        c.unchanged = unchanged;
    }
    Ok(())
}

/// A tuple ` name[type]:value ...` up to its end or ` new-tuple:`; returns
/// the columns, the unchanged-TOAST columns and the rest.
fn td_tuple(mut s: &str) -> Result<(Cols, Vec<String>, &str), String> {
    let mut cols = Vec::new();
    let mut unchanged = Vec::new();
    while let Some(rest) = s.strip_prefix(' ') {
        if rest.starts_with("new-tuple:") {
            return Ok((cols, unchanged, rest));
        }
        let (name, rest) = td_ident(rest, &['['])?;
        let rest = rest
            .strip_prefix('[')
            .ok_or_else(|| format!("'[' expected after column {name}"))?;
        let close = rest
            .find("]:")
            .ok_or_else(|| format!("type of column {name} not closed"))?;
        let type_name = &rest[..close];
        let (value, rest) = td_value(&rest[close + 2..], type_name)?;
        match value {
            Some(v) => cols.push((name, v)),
            None => unchanged.push(name),
        }
        s = rest;
    }
    if !s.is_empty() {
        return Err(format!("unexpected text {s:?}"));
    }
    Ok((cols, unchanged, s))
}

/// One `table ...` row: its changes (a TRUNCATE names several relations).
fn td_table_row(row: &str) -> Result<Vec<Change>, String> {
    let mut rest = row
        .strip_prefix("table ")
        .ok_or_else(|| "not a table row".to_string())?;
    let mut relations = Vec::new();
    loop {
        let (rel, r) = td_relation(rest)?;
        relations.push(rel);
        if let Some(r) = r.strip_prefix(", ") {
            rest = r;
        } else {
            rest = r
                .strip_prefix(": ")
                .ok_or_else(|| format!("': ' expected at {r:?}"))?;
            break;
        }
    }
    let colon = rest
        .find(':')
        .ok_or_else(|| "action without ':'".to_string())?;
    let (action, body) = (&rest[..colon], &rest[colon + 1..]);
    let no_data = body == " (no-tuple-data)";
    let one = |c: Change| Ok(vec![c]);
    match action {
        "INSERT" => {
            let mut c = Change::bare('I', relations[0].clone());
            td_new_row(&mut c, body)?;
            one(c)
        }
        "UPDATE" => {
            let mut c = Change::bare('U', relations[0].clone());
            let mut body = body;
            if let Some(old) = body.strip_prefix(" old-key:") {
                let (cols, _, rest) = td_tuple(old)?;
                c.old = Some(Old { kind: 'K', cols });
                body = rest
                    .strip_prefix("new-tuple:")
                    .ok_or_else(|| format!("new-tuple expected in {row}"))?;
            }
            td_new_row(&mut c, body)?;
            one(c)
        }
        "DELETE" => {
            let mut c = Change::bare('D', relations[0].clone());
            if !no_data {
                let (cols, _, _) = td_tuple(body)?;
                c.old = Some(Old { kind: 'K', cols });
            }
            one(c)
        }
        "TRUNCATE" => Ok(relations
            .into_iter()
            .map(|r| Change::bare('T', r))
            .collect()),
        a => Err(format!("unexpected action {a}")),
    }
}

/// The gid of `'gid', txid N` (PREPARE TRANSACTION, COMMIT / ROLLBACK
/// PREPARED).
fn td_gid(rest: &str) -> Result<String, String> {
    let (gid, _) = td_value(rest, "text")?;
    gid.flatten()
        .ok_or_else(|| format!("gid expected at {rest:?}"))
}

/// `message: transactional: 1 prefix: p, sz: 3 content:abc`.
fn td_message(row: &str) -> Result<Change, String> {
    let rest = row
        .strip_prefix("message: transactional: ")
        .ok_or_else(|| "not a message".to_string())?;
    let transactional = rest.starts_with('1');
    let rest = rest
        .get(1..)
        .and_then(|r| r.strip_prefix(" prefix: "))
        .ok_or_else(|| "prefix expected".to_string())?;
    let sz_at = rest
        .find(", sz: ")
        .ok_or_else(|| "sz expected".to_string())?;
    let prefix = rest[..sz_at].to_string();
    let rest = &rest[sz_at + 6..];
    let content_at = rest
        .find(" content:")
        .ok_or_else(|| "content expected".to_string())?;
    let size: usize = rest[..content_at].parse().map_err(|e| format!("sz: {e}"))?;
    let content = rest.as_bytes()[content_at + 9..].to_vec();
    if content.len() != size {
        return Err(format!("content of {} bytes, sz {size}", content.len()));
    }
    let mut c = Change::bare('M', String::new());
    c.message = Some(Message {
        transactional,
        prefix,
        content,
    });
    Ok(c)
}

/// Reads test_decoding's rows (`include-xids` on, no streaming; prepared
/// transactions as committed at COMMIT PREPARED) into transactions of changes with their values: PostgreSQL's
/// text of each value (booleans `t`/`f`), `None` for NULL; unchanged TOAST
/// values are left out of the row and named in `unchanged`; an old key or
/// old row is kind `'K'` (test_decoding leaves its NULLs out).
pub fn read_test_decoding_rows(rows: &[String]) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut open: Option<(u32, Vec<Change>)> = None;
    let mut prepared: HashMap<String, Item> = HashMap::new();
    for (n, row) in rows.iter().enumerate() {
        let ctx = |e: String| format!("test_decoding row {n} ({}): {e}", truncate(row, 200));
        if let Some(x) = row.strip_prefix("BEGIN ") {
            if open.is_some() {
                return Err(ctx("BEGIN inside a transaction".into()));
            }
            let xid = x.trim().parse::<u32>().map_err(|e| ctx(e.to_string()))?;
            open = Some((xid, Vec::new()));
        } else if let Some(x) = row.strip_prefix("COMMIT ") {
            let (xid, changes) = open
                .take()
                .ok_or_else(|| ctx("COMMIT outside a transaction".into()))?;
            let committed = x.split(' ').next().unwrap_or("");
            if committed != xid.to_string() {
                return Err(ctx(format!("COMMIT of {committed} closes {xid}")));
            }
            items.push(Item::Txn { xid, changes });
        } else if let Some(rest) = row.strip_prefix("PREPARE TRANSACTION ") {
            // Two-phase: read as committed at COMMIT PREPARED.
            let (xid, changes) = open
                .take()
                .ok_or_else(|| ctx("PREPARE outside a transaction".into()))?;
            prepared.insert(td_gid(rest).map_err(ctx)?, Item::Txn { xid, changes });
        } else if let Some(rest) = row.strip_prefix("COMMIT PREPARED ") {
            let gid = td_gid(rest).map_err(ctx)?;
            let txn = prepared
                .remove(&gid)
                .ok_or_else(|| ctx(format!("COMMIT PREPARED of {gid} without its PREPARE")))?;
            items.push(txn);
        } else if let Some(rest) = row.strip_prefix("ROLLBACK PREPARED ") {
            prepared.remove(&td_gid(rest).map_err(ctx)?);
        } else if row.starts_with("table ") {
            for c in td_table_row(row).map_err(ctx)? {
                push_change(&mut items, &mut open, c);
            }
        } else if row.starts_with("message: ") {
            let c = td_message(row).map_err(ctx)?;
            push_change(&mut items, &mut open, c);
        } else {
            return Err(ctx("unexpected row".into()));
        }
    }
    if let Some((xid, _)) = open {
        return Err(format!("test_decoding: transaction {xid} has no COMMIT"));
    }
    Ok(items)
}
