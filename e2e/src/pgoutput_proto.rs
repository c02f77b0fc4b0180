//! A decoder of pgoutput's binary protocol, version 1 (what
//! `pg_logical_slot_peek_binary_changes(slot, NULL, NULL, 'proto_version',
//! '1', 'publication_names', ...)` returns: one message per row), into the
//! [`crate::change_stream`] form.

use crate::change_stream::{push_change, Change, Cols, Item, Message, Old};
use std::collections::HashMap;

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.i..self.i + n)
            .ok_or_else(|| format!("message truncated at byte {} (wanted {n} more)", self.i))?;
        self.i += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn i16(&mut self) -> Result<i16, String> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn i32(&mut self) -> Result<i32, String> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
    fn cstr(&mut self) -> Result<String, String> {
        let rest = &self.b[self.i..];
        let end = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| "unterminated string".to_string())?;
        let s = String::from_utf8(rest[..end].to_vec()).map_err(|e| e.to_string())?;
        self.i += end + 1;
        Ok(s)
    }
    fn done(&self) -> Result<(), String> {
        if self.i == self.b.len() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected trailing bytes",
                self.b.len() - self.i
            ))
        }
    }
}

#[derive(Debug, Clone)]
struct RelInfo {
    name: String,
    columns: Vec<String>,
}

/// A tuple: (values of the sent columns, names of the 'u' columns).
fn read_tuple(r: &mut Reader, rel: &RelInfo) -> Result<(Cols, Vec<String>), String> {
    let n = r.i16()? as usize;
    if n != rel.columns.len() {
        return Err(format!(
            "tuple of {} has {n} columns, its R message {}",
            rel.name,
            rel.columns.len()
        ));
    }
    let mut cols = Vec::new();
    let mut unchanged = Vec::new();
    for name in &rel.columns {
        match r.u8()? {
            b'n' => cols.push((name.clone(), None)),
            b'u' => unchanged.push(name.clone()),
            b't' => {
                let len = r.i32()?;
                let bytes = r.take(len as usize)?;
                let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
                cols.push((name.clone(), Some(text)));
            }
            k => return Err(format!("unexpected column kind {:?}", k as char)),
        }
    }
    Ok((cols, unchanged))
}

/// The old tuple of an UPDATE or DELETE, of kind `tag` (`K` or `O`); it
/// never has unchanged-TOAST columns.
fn read_old_tuple(r: &mut Reader, rel: &RelInfo, tag: u8) -> Result<Old, String> {
    let (cols, unchanged) = read_tuple(r, rel)?;
    if !unchanged.is_empty() {
        return Err(format!("unchanged TOAST in old tuple: {unchanged:?}"));
    }
    Ok(Old {
        kind: tag as char,
        cols,
    })
}

/// Decodes the rows of `pg_logical_slot_peek_binary_changes` (proto_version 1).
pub fn decode_pgoutput(rows: &[Vec<u8>]) -> Result<Vec<Item>, String> {
    let mut rels: HashMap<u32, RelInfo> = HashMap::new();
    let mut items = Vec::new();
    let mut open: Option<(u32, Vec<Change>)> = None;
    for (n, row) in rows.iter().enumerate() {
        let mut r = Reader { b: row, i: 0 };
        let kind = r.u8()?;
        let ctx = |e: String| format!("pgoutput row {n} ({}): {e}", kind as char);
        let rel_of = |rels: &HashMap<u32, RelInfo>, oid: u32| {
            rels.get(&oid)
                .cloned()
                .ok_or_else(|| format!("relation {oid} used before its R message"))
        };
        match kind {
            b'B' => {
                r.u64().map_err(ctx)?; // final LSN
                r.u64().map_err(ctx)?; // commit time
                let xid = r.u32().map_err(ctx)?;
                if open.is_some() {
                    return Err(ctx("BEGIN inside a transaction".into()));
                }
                open = Some((xid, Vec::new()));
            }
            b'C' => {
                r.u8().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                r.u64().map_err(ctx)?;
                let (xid, changes) = open
                    .take()
                    .ok_or_else(|| ctx("COMMIT outside a transaction".into()))?;
                items.push(Item::Txn { xid, changes });
            }
            b'O' => {
                r.u64().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
            }
            b'R' => {
                let oid = r.u32().map_err(ctx)?;
                let mut nsp = r.cstr().map_err(ctx)?;
                if nsp.is_empty() {
                    nsp = "pg_catalog".into();
                }
                let relname = r.cstr().map_err(ctx)?;
                r.u8().map_err(ctx)?; // replica identity
                let natts = r.i16().map_err(ctx)?;
                let mut columns = Vec::new();
                for _ in 0..natts {
                    r.u8().map_err(ctx)?; // flags
                    columns.push(r.cstr().map_err(ctx)?);
                    r.u32().map_err(ctx)?; // type
                    r.i32().map_err(ctx)?; // typmod
                }
                rels.insert(
                    oid,
                    RelInfo {
                        name: format!("{nsp}.{relname}"),
                        columns,
                    },
                );
            }
            b'Y' => {
                r.u32().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
                r.cstr().map_err(ctx)?;
            }
            b'I' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                if r.u8().map_err(ctx)? != b'N' {
                    return Err(ctx("INSERT without 'N'".into()));
                }
                let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                let mut c = Change::bare('I', rel.name.clone());
                c.new = Some(cols);
                c.unchanged = unchanged;
                push_change(&mut items, &mut open, c);
            }
            b'U' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                let mut c = Change::bare('U', rel.name.clone());
                let mut tag = r.u8().map_err(ctx)?;
                if tag == b'K' || tag == b'O' {
                    c.old = Some(read_old_tuple(&mut r, &rel, tag).map_err(ctx)?);
                    tag = r.u8().map_err(ctx)?;
                }
                if tag != b'N' {
                    return Err(ctx(format!("UPDATE: unexpected {:?}", tag as char)));
                }
                let (cols, unchanged) = read_tuple(&mut r, &rel).map_err(ctx)?;
                c.new = Some(cols);
                c.unchanged = unchanged;
                push_change(&mut items, &mut open, c);
            }
            b'D' => {
                let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                let tag = r.u8().map_err(ctx)?;
                if tag != b'K' && tag != b'O' {
                    return Err(ctx(format!("DELETE: unexpected {:?}", tag as char)));
                }
                let mut c = Change::bare('D', rel.name.clone());
                c.old = Some(read_old_tuple(&mut r, &rel, tag).map_err(ctx)?);
                push_change(&mut items, &mut open, c);
            }
            b'T' => {
                let n = r.u32().map_err(ctx)?;
                r.u8().map_err(ctx)?; // cascade / restart identity
                for _ in 0..n {
                    let rel = rel_of(&rels, r.u32().map_err(ctx)?).map_err(ctx)?;
                    push_change(&mut items, &mut open, Change::bare('T', rel.name.clone()));
                }
            }
            b'M' => {
                let flags = r.u8().map_err(ctx)?;
                r.u64().map_err(ctx)?; // LSN
                let prefix = r.cstr().map_err(ctx)?;
                let len = r.i32().map_err(ctx)?;
                let content = r.take(len as usize).map_err(ctx)?.to_vec();
                let mut c = Change::bare('M', String::new());
                c.message = Some(Message {
                    transactional: flags & 1 != 0,
                    prefix,
                    content,
                });
                push_change(&mut items, &mut open, c);
            }
            k => return Err(ctx(format!("unexpected message type {:?}", k as char))),
        }
        r.done().map_err(ctx)?;
    }
    if let Some((xid, _)) = open {
        return Err(format!("pgoutput: transaction {xid} has no COMMIT"));
    }
    Ok(items)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn pgoutput_messages() {
        // Captured from PostgreSQL 15: INSERT INTO t VALUES (2, 2) and a
        // DELETE with a key tuple.
        let hex = [
            "420000000004532f20000304a35d311acc0000063e",
            "52000046027075626c69630074006400020169640000000017ffffffff00760000000017ffffffff",
            "49000046024e0002740000000132740000000132",
            "43000000000004532f200000000004532f50000304a35d311acc",
            "420000000004532fe8000304a35d311cd20000063f",
            "44000046024b00027400000001326e",
            "43000000000004532fe80000000004533018000304a35d311cd2",
            "4d01000000000453305070000000000163",
        ];
        let rows: Vec<Vec<u8>> = hex
            .iter()
            .map(|h| {
                (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                    .collect()
            })
            .collect();
        let items = decode_pgoutput(&rows).expect("decodes");
        assert_eq!(items.len(), 3);
        let Item::Txn { xid, changes } = &items[0] else {
            panic!("not a transaction")
        };
        assert_eq!(*xid, 1598);
        assert_eq!(changes[0].relation, "public.t");
        assert_eq!(
            changes[0].new,
            Some(vec![
                ("id".into(), Some("2".into())),
                ("v".into(), Some("2".into()))
            ])
        );
        let Item::Txn { changes, .. } = &items[1] else {
            panic!("not a transaction")
        };
        assert_eq!(changes[0].action, 'D');
        assert_eq!(
            changes[0].old,
            Some(Old {
                kind: 'K',
                cols: vec![("id".into(), Some("2".into())), ("v".into(), None)]
            })
        );
        let Item::Loose(m) = &items[2] else {
            panic!("not loose")
        };
        assert_eq!(
            m.message,
            Some(Message {
                transactional: true,
                prefix: "p".into(),
                content: b"c".to_vec()
            })
        );
    }
}
