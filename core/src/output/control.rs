//! pubjson's own objects for streamed and two-phase transactions (pure code).
//!
//! wal2json has no equivalent, so these are pubjson's design, the same in
//! both formats (one JSON object per output message):
//!
//! | action | when | fields |
//! |---|---|---|
//! | `S` | a block of an in-progress transaction starts | `xid` (top-level), `first` |
//! | `E` | the block ends | `xid` |
//! | `A` | a streamed (sub)transaction aborted | `xid`, `subxid` (= `xid` for the whole transaction), `lsn` |
//! | `C` + `"streamed":true` | a streamed transaction committed | `xid`, `lsn`, `nextlsn`, `timestamp` |
//! | `P` | PREPARE TRANSACTION decoded | `xid`, `gid`, `lsn`, `nextlsn`, `timestamp`, `streamed` |
//! | `CP` / `RP` | COMMIT / ROLLBACK PREPARED | `xid`, `gid`, `lsn`, `nextlsn`, `timestamp` |
//!
//! In format 1 a block is one document: the `S` object with the block's
//! changes in a `change` array, and no `E`.

use crate::text::json::{push_json_string, push_lsn, push_u64};

fn start(out: &mut Vec<u8>, action: &[u8], xid: u32) {
    out.extend_from_slice(b"{\"action\":\"");
    out.extend_from_slice(action);
    out.extend_from_slice(b"\",\"xid\":");
    push_u64(out, xid as u64);
}

fn lsn_field(out: &mut Vec<u8>, key: &[u8], lsn: u64) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    if lsn == 0 {
        out.extend_from_slice(b"null");
    } else {
        out.push(b'"');
        push_lsn(out, lsn);
        out.push(b'"');
    }
}

fn timestamp_field(out: &mut Vec<u8>, timestamp: &[u8]) {
    out.extend_from_slice(b",\"timestamp\":\"");
    out.extend_from_slice(timestamp);
    out.push(b'"');
}

/// `{"action":"S","xid":T,"first":true` (format 2 closes it with `}`,
/// format 1 continues with `,"change":[`).
pub fn stream_start_open(out: &mut Vec<u8>, xid: u32, first: bool) {
    start(out, b"S", xid);
    out.extend_from_slice(if first {
        b",\"first\":true"
    } else {
        b",\"first\":false"
    });
}

pub fn stream_stop(out: &mut Vec<u8>, xid: u32) {
    start(out, b"E", xid);
    out.push(b'}');
}

/// `lsn` 0 means unknown (the server restarted before the abort was logged).
pub fn stream_abort(out: &mut Vec<u8>, xid: u32, subxid: u32, lsn: u64) {
    start(out, b"A", xid);
    out.extend_from_slice(b",\"subxid\":");
    push_u64(out, subxid as u64);
    lsn_field(out, b"lsn", lsn);
    out.push(b'}');
}

pub fn stream_commit(out: &mut Vec<u8>, xid: u32, commit_lsn: u64, end_lsn: u64, timestamp: &[u8]) {
    start(out, b"C", xid);
    out.extend_from_slice(b",\"streamed\":true");
    lsn_field(out, b"lsn", commit_lsn);
    lsn_field(out, b"nextlsn", end_lsn);
    timestamp_field(out, timestamp);
    out.push(b'}');
}

/// Which two-phase event a [`two_phase`] object reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwoPhaseEvent {
    Prepare { streamed: bool },
    CommitPrepared,
    RollbackPrepared,
}

#[allow(clippy::too_many_arguments)]
pub fn two_phase(
    out: &mut Vec<u8>,
    event: TwoPhaseEvent,
    xid: u32,
    gid: &[u8],
    lsn: u64,
    end_lsn: u64,
    timestamp: &[u8],
) {
    let action: &[u8] = match event {
        TwoPhaseEvent::Prepare { .. } => b"P",
        TwoPhaseEvent::CommitPrepared => b"CP",
        TwoPhaseEvent::RollbackPrepared => b"RP",
    };
    start(out, action, xid);
    out.extend_from_slice(b",\"gid\":");
    push_json_string(out, gid);
    lsn_field(out, b"lsn", lsn);
    lsn_field(out, b"nextlsn", end_lsn);
    timestamp_field(out, timestamp);
    if let TwoPhaseEvent::Prepare { streamed } = event {
        out.extend_from_slice(if streamed {
            b",\"streamed\":true"
        } else {
            b",\"streamed\":false"
        });
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn stream_objects() {
        let mut out = Vec::new();
        stream_start_open(&mut out, 7, true);
        out.push(b'}');
        assert_eq!(s(out), r#"{"action":"S","xid":7,"first":true}"#);
        let mut out = Vec::new();
        stream_stop(&mut out, 7);
        assert_eq!(s(out), r#"{"action":"E","xid":7}"#);
        let mut out = Vec::new();
        stream_abort(&mut out, 7, 9, 0x1_0000_0010);
        assert_eq!(s(out), r#"{"action":"A","xid":7,"subxid":9,"lsn":"1/10"}"#);
        let mut out = Vec::new();
        stream_abort(&mut out, 7, 7, 0);
        assert_eq!(s(out), r#"{"action":"A","xid":7,"subxid":7,"lsn":null}"#);
        let mut out = Vec::new();
        stream_commit(&mut out, 7, 0x20, 0x30, b"2026-01-01 00:00:00+00");
        assert_eq!(
            s(out),
            r#"{"action":"C","xid":7,"streamed":true,"lsn":"0/20","nextlsn":"0/30","timestamp":"2026-01-01 00:00:00+00"}"#
        );
    }

    #[test]
    fn two_phase_objects() {
        let mut out = Vec::new();
        two_phase(
            &mut out,
            TwoPhaseEvent::Prepare { streamed: false },
            5,
            b"g\"1",
            0x10,
            0x20,
            b"t",
        );
        assert_eq!(
            s(out),
            r#"{"action":"P","xid":5,"gid":"g\"1","lsn":"0/10","nextlsn":"0/20","timestamp":"t","streamed":false}"#
        );
        let mut out = Vec::new();
        two_phase(
            &mut out,
            TwoPhaseEvent::CommitPrepared,
            5,
            b"g",
            0x10,
            0x20,
            b"t",
        );
        assert_eq!(
            s(out),
            r#"{"action":"CP","xid":5,"gid":"g","lsn":"0/10","nextlsn":"0/20","timestamp":"t"}"#
        );
        let mut out = Vec::new();
        two_phase(
            &mut out,
            TwoPhaseEvent::RollbackPrepared,
            5,
            b"g",
            0x10,
            0x20,
            b"t",
        );
        assert_eq!(
            s(out),
            r#"{"action":"RP","xid":5,"gid":"g","lsn":"0/10","nextlsn":"0/20","timestamp":"t"}"#
        );
    }
}
