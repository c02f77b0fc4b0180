//! The stream every reader of this library gives, whatever plugin wrote
//! it: transactions of changes (and changes outside a transaction), each
//! value as PostgreSQL text, so that streams of different plugins compare
//! ([`crate::stream_comparison`]). Readers: [`crate::pgoutput_proto`],
//! [`crate::pubjson_reader`], [`crate::test_decoding_reader`].

use crate::truncate;
use std::fmt;

/// One column value as PostgreSQL text (`None`: NULL).
pub type Cols = Vec<(String, Option<String>)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub transactional: bool,
    pub prefix: String,
    pub content: Vec<u8>,
}

/// The old row of an UPDATE or DELETE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Old {
    /// pgoutput: `'K'` (key columns, others NULL) or `'O'` (REPLICA
    /// IDENTITY FULL); pubjson: `'J'` (its "identity").
    pub kind: char,
    pub cols: Cols,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// I, U, D, T or M.
    pub action: char,
    /// pubjson's `transformedfrom`: the action it was before.
    pub transformed: Option<String>,
    /// `schema.table` (empty for M).
    pub relation: String,
    /// The new row without the unchanged-TOAST columns.
    pub new: Option<Cols>,
    /// pgoutput: columns sent as 'u' (unchanged TOAST).
    pub unchanged: Vec<String>,
    pub old: Option<Old>,
    pub message: Option<Message>,
}

impl Change {
    pub(crate) fn bare(action: char, relation: String) -> Change {
        Change {
            action,
            relation,
            transformed: None,
            new: None,
            unchanged: Vec::new(),
            old: None,
            message: None,
        }
    }
}

pub(crate) fn show_cols(cols: &Cols) -> String {
    cols.iter()
        .map(|(n, v)| match v {
            Some(v) => format!("{n}={}", truncate(v, 40)),
            None => format!("{n}=NULL"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.action)?;
        if let Some(t) = &self.transformed {
            write!(f, "(from {t})")?;
        }
        if !self.relation.is_empty() {
            write!(f, " {}", self.relation)?;
        }
        if let Some(n) = &self.new {
            write!(f, " new[{}]", show_cols(n))?;
        }
        if !self.unchanged.is_empty() {
            write!(f, " unchanged-toast[{}]", self.unchanged.join(", "))?;
        }
        if let Some(o) = &self.old {
            write!(f, " old {}[{}]", o.kind, show_cols(&o.cols))?;
        }
        if let Some(m) = &self.message {
            write!(
                f,
                " transactional={} prefix={:?} content={:?}",
                m.transactional,
                m.prefix,
                truncate(&String::from_utf8_lossy(&m.content), 60)
            )?;
        }
        Ok(())
    }
}

/// A decoded transaction, or a change outside any (non-transactional message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Txn { xid: u32, changes: Vec<Change> },
    Loose(Change),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Item::Txn { xid, changes } => {
                writeln!(f, "  BEGIN xid {xid}")?;
                for c in changes {
                    writeln!(f, "    {c}")?;
                }
                write!(f, "  COMMIT")
            }
            Item::Loose(c) => write!(f, "  (outside a transaction) {c}"),
        }
    }
}

pub fn show_items(items: &[Item], max_lines: usize) -> String {
    let text = items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= max_lines {
        text
    } else {
        format!(
            "{}\n  … {} more lines",
            lines[..max_lines].join("\n"),
            lines.len() - max_lines
        )
    }
}

/// Pushes a change into the open transaction, or as a loose item.
pub(crate) fn push_change(items: &mut Vec<Item>, open: &mut Option<(u32, Vec<Change>)>, c: Change) {
    match open {
        Some((_, changes)) => changes.push(c),
        None => items.push(Item::Loose(c)),
    }
}

/// The xids of the transactions in a stream.
pub fn xids(items: &[Item]) -> Vec<u32> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Txn { xid, .. } => Some(*xid),
            Item::Loose(_) => None,
        })
        .collect()
}

/// Columns from `(name, value)` pairs, for unit tests.
#[cfg(test)]
pub(crate) fn cols(pairs: &[(&str, Option<&str>)]) -> Cols {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.map(str::to_string)))
        .collect()
}
