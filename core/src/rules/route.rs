//! The routing decision (pure code): for every kind of event — a row
//! change, a backfilled row and a backfill's markers, a truncated table, a
//! logical message, a DDL event and each table it changed — whether it is
//! emitted, as what (the kind a row filter turned an UPDATE into, under its
//! published root's name and columns) or why not ([`Skip`], which the
//! statistics count in one place: `stats::Counters::count_route`).
//!
//! Its inputs are small: the session's rules ([`SessionRules`], built once
//! from the options and the format) and the relation's ([`TableRules`],
//! built once per relation cache entry); the publication's row filter,
//! which needs PostgreSQL's executor, is asked through a closure, only when
//! the decision comes to it.
//!
//! Which rules apply to which event (the policies differ, on purpose):
//!
//! | event | wal2json `actions` | `add-tables`/`filter-tables` | publications | the format |
//! |---|---|---|---|---|
//! | row change | its kind | the table (its root's name when published via the root) | actions, no DELETE without its old row, row filter (UPDATE → INSERT/DELETE), via the root | every format writes rows |
//! | backfilled row | no: it is a row's state, not an action | as a row | as an INSERT | [`FormatEvents::backfill`] |
//! | backfill marker | no | the table | the table is published | [`FormatEvents::backfill`] |
//! | truncate, per table | `truncate` | the table | `truncate`; a partition published via its root is not sent (pgoutput) | [`FormatEvents::truncate`] |
//! | message | `messages`, `add-msg-prefixes`, `filter-msg-prefixes`; DDL capture's prefix only when named in `add-msg-prefixes` | — | — | every format writes messages |
//! | DDL table | no | no (docs/ddl.md) | published, described as its root when published via the root | — |
//! | DDL event | no | no | a table of it shown, or a dropped table its publications published | [`FormatEvents::ddl`] |
//!
//! Without `publication_names`, no publication rule applies (wal2json's
//! mode): every table is "published" as itself.

use crate::model::ChangeKind;
use crate::options::{Actions, Options};
use crate::protocol::ddl;
use crate::rules::row_filter::FilterVerdict;

/// What a format writes beyond rows and messages (`OutputFormat::events`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatEvents {
    /// Truncated tables (wal2json's format 1 has no object for them).
    pub truncate: bool,
    /// Backfilled rows and their markers (`pubjson.backfill()`).
    pub backfill: bool,
    /// DDL events (DDL capture); without, its messages are ordinary
    /// messages.
    pub ddl: bool,
}

/// What publications publish of a relation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PubActions {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

impl PubActions {
    /// What two publications publish together.
    pub fn merge(&mut self, other: PubActions) {
        self.insert |= other.insert;
        self.update |= other.update;
        self.delete |= other.delete;
        self.truncate |= other.truncate;
    }

    /// The row-filtered actions, in pgoutput's order (insert, update,
    /// delete).
    pub fn dml(&self) -> [bool; 3] {
        [self.insert, self.update, self.delete]
    }

    /// Whether rows of `kind` are published.
    pub fn publishes(&self, kind: ChangeKind) -> bool {
        match kind {
            ChangeKind::Insert => self.insert,
            ChangeKind::Update => self.update,
            ChangeKind::Delete => self.delete,
        }
    }
}

/// The session's side of the decision, built once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRules {
    /// wal2json's `actions`.
    pub actions: Actions,
    /// `publication_names`: pgoutput's rules apply (`None`: wal2json's
    /// mode).
    pub publication_names: Option<Vec<Vec<u8>>>,
    /// What the format writes.
    pub format: FormatEvents,
    /// Messages are emitted (`messages`, by default unless publications
    /// are named).
    pub messages: bool,
    pub add_msg_prefixes: Vec<Vec<u8>>,
    pub filter_msg_prefixes: Vec<Vec<u8>>,
}

impl SessionRules {
    pub fn new(opts: &Options, format: FormatEvents) -> Self {
        SessionRules {
            actions: opts.actions,
            publication_names: opts.publication_names.clone(),
            format,
            messages: opts.messages_enabled(),
            add_msg_prefixes: opts.add_msg_prefixes.clone(),
            filter_msg_prefixes: opts.filter_msg_prefixes.clone(),
        }
    }

    fn actions_allow(&self, kind: ChangeKind) -> bool {
        match kind {
            ChangeKind::Insert => self.actions.insert,
            ChangeKind::Update => self.actions.update,
            ChangeKind::Delete => self.actions.delete,
        }
    }

    fn prefix_wanted(&self, prefix: &[u8]) -> bool {
        !self.filter_msg_prefixes.iter().any(|p| p == prefix)
            && (self.add_msg_prefixes.is_empty()
                || self.add_msg_prefixes.iter().any(|p| p == prefix))
    }
}

/// A relation's side of the decision, built once per relation cache
/// entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableRules {
    /// Its name passes `add-tables` / `filter-tables`.
    pub wanted: bool,
    /// `pubjson.backfill_progress`: its rows are the extension's own.
    pub internal: bool,
    /// A partition.
    pub partition: bool,
    /// With `publication_names`: how they publish it (`None`: they do
    /// not; always `None` without publications).
    pub published: Option<Published>,
}

/// How the session's publications publish a relation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    pub actions: PubActions,
    /// Under its topmost published ancestor's name and columns
    /// (`publish_via_partition_root`).
    pub via_root: bool,
    /// The name it is published under passes `add-tables` /
    /// `filter-tables`.
    pub wanted_as_published: bool,
}

/// An event to route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// An INSERT, UPDATE or DELETE from the WAL; `has_old`: its old row
    /// (or key) is there.
    Change { kind: ChangeKind, has_old: bool },
    /// A backfilled row: the row's state at its chunk's commit.
    BackfillRow,
    /// The start or end of a table's backfill.
    BackfillMarker,
    /// One table of a TRUNCATE.
    Truncate,
    /// A logical decoding message.
    Message { prefix: &'a [u8] },
    /// A table a DDL event changed: described in the event or not.
    DdlTable,
    /// A DDL event as a whole: `tables_shown` of its tables are described
    /// ([`Event::DdlTable`]); `drops_table`: it dropped a table, which
    /// `dropped_from` (the publications the trigger recorded) published.
    Ddl {
        tables_shown: usize,
        drops_table: bool,
        dropped_from: &'a [Vec<u8>],
    },
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Emit(Emit),
    Skip(Skip),
}

/// How an event is emitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Emit {
    /// A row's kind as emitted.
    pub kind: Option<ChangeKind>,
    /// The kind a row filter transformed (an UPDATE became `kind`).
    pub transformed_from: Option<ChangeKind>,
    /// Under its published root's name and columns.
    pub as_root: bool,
    /// The publication's column list applies.
    pub column_list: bool,
}

/// Why an event is not emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its kind is not asked for: wal2json's `actions`, the publications'
    /// actions, the message options, or the format has no such event.
    Action,
    /// Its table is not the consumer's: `add-tables`/`filter-tables`, not
    /// published, a partition published as its root.
    Table,
    /// The publication's row filter.
    RowFilter,
    /// The extension's own (`pubjson.backfill_progress`): never a change.
    Internal,
}

/// Decides `event`; `table` is the relation's rules (`None`: an event of
/// no relation, or of one that could not be read: not the consumer's).
/// `row_filter` evaluates the publication's row filter for a change of a
/// kind (it is called at most once, only for rows the rest lets through).
pub fn route(
    session: &SessionRules,
    table: Option<&TableRules>,
    event: Event<'_>,
    row_filter: impl FnOnce(ChangeKind) -> FilterVerdict,
) -> Route {
    use Route::Skip as No;
    let emit = Route::Emit(Emit::default());
    match event {
        Event::Message { prefix } => {
            // Turning DDL capture on shows a consumer nothing new unless it
            // asks for the prefix by name.
            let capture_unasked =
                prefix == ddl::PREFIX && !session.add_msg_prefixes.iter().any(|p| p == prefix);
            if capture_unasked || !session.messages || !session.prefix_wanted(prefix) {
                return No(Skip::Action);
            }
            return emit;
        }
        Event::Ddl {
            tables_shown,
            drops_table,
            dropped_from,
        } => {
            if !session.format.ddl {
                return No(Skip::Action);
            }
            let Some(names) = &session.publication_names else {
                return emit;
            };
            let dropped_published = drops_table && dropped_from.iter().any(|p| names.contains(p));
            return if tables_shown > 0 || dropped_published {
                emit
            } else {
                No(Skip::Table)
            };
        }
        _ => {}
    }
    let Some(table) = table else {
        return No(Skip::Table);
    };
    if table.internal {
        return No(Skip::Internal);
    }
    let publications = session.publication_names.is_some();
    match event {
        Event::DdlTable => match (publications, table.published) {
            (false, _) => emit,
            (true, Some(p)) => Route::Emit(Emit {
                as_root: p.via_root,
                column_list: true,
                ..Emit::default()
            }),
            (true, None) => No(Skip::Table),
        },
        Event::Truncate => {
            if !session.actions.truncate || !session.format.truncate {
                return No(Skip::Action);
            }
            if publications {
                let Some(p) = table.published else {
                    return No(Skip::Table);
                };
                if table.partition && p.via_root {
                    return No(Skip::Table);
                }
                if !p.actions.truncate {
                    return No(Skip::Action);
                }
            }
            if table.wanted {
                emit
            } else {
                No(Skip::Table)
            }
        }
        Event::BackfillMarker => {
            if !session.format.backfill {
                return No(Skip::Action);
            }
            if table.wanted && (!publications || table.published.is_some()) {
                emit
            } else {
                No(Skip::Table)
            }
        }
        Event::BackfillRow => {
            if !session.format.backfill {
                return No(Skip::Action);
            }
            route_row(session, table, ChangeKind::Insert, false, row_filter)
        }
        Event::Change { kind, has_old } => {
            if !session.actions_allow(kind) {
                return No(Skip::Action);
            }
            route_row(session, table, kind, has_old, row_filter)
        }
        Event::Message { .. } | Event::Ddl { .. } => emit,
    }
}

/// pgoutput_change()'s decisions for a row, in its order (its
/// publications, their actions, the partition root, the row filter), with
/// wal2json's table options on the name it is published under.
fn route_row(
    session: &SessionRules,
    table: &TableRules,
    kind: ChangeKind,
    has_old: bool,
    row_filter: impl FnOnce(ChangeKind) -> FilterVerdict,
) -> Route {
    let Some(_) = session.publication_names else {
        // wal2json's mode: the change as decoded.
        if !table.wanted {
            return Route::Skip(Skip::Table);
        }
        return Route::Emit(Emit {
            kind: Some(kind),
            ..Emit::default()
        });
    };
    let Some(p) = table.published else {
        return Route::Skip(Skip::Table);
    };
    // pgoutput sends no DELETE without an old tuple (REPLICA IDENTITY
    // NOTHING).
    if !p.actions.publishes(kind) || (kind == ChangeKind::Delete && !has_old) {
        return Route::Skip(Skip::Action);
    }
    // Before the row filter: a table the consumer does not want costs no
    // evaluation.
    if !p.wanted_as_published {
        return Route::Skip(Skip::Table);
    }
    match row_filter(kind) {
        FilterVerdict::Drop => Route::Skip(Skip::RowFilter),
        FilterVerdict::Emit {
            kind: emitted,
            transformed,
        } => Route::Emit(Emit {
            kind: Some(emitted),
            transformed_from: transformed.then_some(kind),
            as_root: p.via_root,
            column_list: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    fn session(publications: bool) -> SessionRules {
        SessionRules {
            actions: Actions {
                insert: true,
                update: true,
                delete: true,
                truncate: true,
            },
            publication_names: publications.then(|| vec![b"p".to_vec()]),
            format: FormatEvents {
                truncate: true,
                backfill: true,
                ddl: true,
            },
            messages: true,
            add_msg_prefixes: Vec::new(),
            filter_msg_prefixes: Vec::new(),
        }
    }

    const ALL: PubActions = PubActions {
        insert: true,
        update: true,
        delete: true,
        truncate: true,
    };

    fn table(published: Option<Published>) -> TableRules {
        TableRules {
            wanted: true,
            internal: false,
            partition: false,
            published,
        }
    }

    fn published() -> Option<Published> {
        Some(Published {
            actions: ALL,
            via_root: false,
            wanted_as_published: true,
        })
    }

    fn pass(kind: ChangeKind) -> FilterVerdict {
        FilterVerdict::Emit {
            kind,
            transformed: false,
        }
    }

    fn unused(_: ChangeKind) -> FilterVerdict {
        panic!("the row filter must not be evaluated")
    }

    fn emitted(kind: ChangeKind) -> Route {
        Route::Emit(Emit {
            kind: Some(kind),
            ..Emit::default()
        })
    }

    const fn change(kind: ChangeKind) -> Event<'static> {
        Event::Change {
            kind,
            has_old: true,
        }
    }

    #[test]
    fn wal2json_mode_rows() {
        let s = session(false);
        assert_eq!(
            route(&s, Some(&table(None)), change(Update), unused),
            emitted(Update)
        );
        let unwanted = TableRules {
            wanted: false,
            ..table(None)
        };
        assert_eq!(
            route(&s, Some(&unwanted), change(Insert), unused),
            Route::Skip(Skip::Table)
        );
        let no_updates = SessionRules {
            actions: Actions {
                update: false,
                ..s.actions
            },
            ..session(false)
        };
        assert_eq!(
            route(&no_updates, Some(&table(None)), change(Update), unused),
            Route::Skip(Skip::Action)
        );
        // A DELETE without its old row is still emitted (wal2json's
        // format decides what it writes of it).
        let delete = Event::Change {
            kind: Delete,
            has_old: false,
        };
        assert_eq!(
            route(&s, Some(&table(None)), delete, unused),
            emitted(Delete)
        );
    }

    #[test]
    fn publication_rows() {
        let s = session(true);
        assert_eq!(
            route(&s, Some(&table(None)), change(Insert), unused),
            Route::Skip(Skip::Table)
        );
        assert_eq!(
            route(&s, Some(&table(published())), change(Insert), pass),
            Route::Emit(Emit {
                kind: Some(Insert),
                column_list: true,
                ..Emit::default()
            })
        );
        let inserts_only = Some(Published {
            actions: PubActions {
                insert: true,
                ..PubActions::default()
            },
            ..published().unwrap_or_default()
        });
        assert_eq!(
            route(&s, Some(&table(inserts_only)), change(Update), unused),
            Route::Skip(Skip::Action)
        );
        let no_old = Event::Change {
            kind: Delete,
            has_old: false,
        };
        assert_eq!(
            route(&s, Some(&table(published())), no_old, unused),
            Route::Skip(Skip::Action)
        );
        assert_eq!(
            route(&s, Some(&table(published())), change(Update), |_| {
                FilterVerdict::Drop
            }),
            Route::Skip(Skip::RowFilter)
        );
        let transformed = route(&s, Some(&table(published())), change(Update), |_| {
            FilterVerdict::Emit {
                kind: Delete,
                transformed: true,
            }
        });
        assert_eq!(
            transformed,
            Route::Emit(Emit {
                kind: Some(Delete),
                transformed_from: Some(Update),
                as_root: false,
                column_list: true,
            })
        );
    }

    #[test]
    fn rows_published_via_the_root_go_by_its_name() {
        let s = session(true);
        let via_root = Published {
            via_root: true,
            ..published().unwrap_or_default()
        };
        let partition = TableRules {
            partition: true,
            // The partition's own name is not wanted; its root's is.
            wanted: false,
            ..table(Some(via_root))
        };
        assert_eq!(
            route(&s, Some(&partition), change(Insert), pass),
            Route::Emit(Emit {
                kind: Some(Insert),
                as_root: true,
                column_list: true,
                ..Emit::default()
            })
        );
        let root_unwanted = TableRules {
            published: Some(Published {
                wanted_as_published: false,
                ..via_root
            }),
            ..partition
        };
        // No filter evaluation for a table the consumer does not want.
        assert_eq!(
            route(&s, Some(&root_unwanted), change(Insert), unused),
            Route::Skip(Skip::Table)
        );
    }

    #[test]
    fn backfilled_rows_ignore_wal2json_actions_but_not_publications() {
        let mut s = session(false);
        s.actions.insert = false;
        assert_eq!(
            route(&s, Some(&table(None)), Event::BackfillRow, unused),
            emitted(Insert)
        );
        let s = session(true);
        assert_eq!(
            route(&s, Some(&table(None)), Event::BackfillRow, unused),
            Route::Skip(Skip::Table)
        );
        assert_eq!(
            route(&s, Some(&table(published())), Event::BackfillRow, |_| {
                FilterVerdict::Drop
            }),
            Route::Skip(Skip::RowFilter)
        );
        let no_backfill = SessionRules {
            format: FormatEvents::default(),
            ..session(false)
        };
        assert_eq!(
            route(&no_backfill, Some(&table(None)), Event::BackfillRow, unused),
            Route::Skip(Skip::Action)
        );
        assert_eq!(
            route(
                &no_backfill,
                Some(&table(None)),
                Event::BackfillMarker,
                unused
            ),
            Route::Skip(Skip::Action)
        );
    }

    #[test]
    fn backfill_markers() {
        let s = session(true);
        assert_eq!(
            route(&s, Some(&table(published())), Event::BackfillMarker, unused),
            Route::Emit(Emit::default())
        );
        assert_eq!(
            route(&s, Some(&table(None)), Event::BackfillMarker, unused),
            Route::Skip(Skip::Table)
        );
        let unwanted = TableRules {
            wanted: false,
            ..table(None)
        };
        assert_eq!(
            route(
                &session(false),
                Some(&unwanted),
                Event::BackfillMarker,
                unused
            ),
            Route::Skip(Skip::Table)
        );
    }

    #[test]
    fn the_extensions_own_table_is_never_a_change() {
        let internal = TableRules {
            internal: true,
            ..table(published())
        };
        for s in [session(false), session(true)] {
            for event in [
                change(Insert),
                Event::BackfillRow,
                Event::Truncate,
                Event::DdlTable,
            ] {
                assert_eq!(
                    route(&s, Some(&internal), event, unused),
                    Route::Skip(Skip::Internal),
                    "{event:?}"
                );
            }
        }
    }

    #[test]
    fn truncates() {
        let s = session(false);
        assert_eq!(
            route(&s, Some(&table(None)), Event::Truncate, unused),
            Route::Emit(Emit::default())
        );
        let mut no_truncate = session(false);
        no_truncate.actions.truncate = false;
        assert_eq!(
            route(&no_truncate, Some(&table(None)), Event::Truncate, unused),
            Route::Skip(Skip::Action)
        );
        let mut format1 = session(false);
        format1.format.truncate = false;
        assert_eq!(
            route(&format1, Some(&table(None)), Event::Truncate, unused),
            Route::Skip(Skip::Action)
        );
        let p = session(true);
        assert_eq!(
            route(&p, Some(&table(None)), Event::Truncate, unused),
            Route::Skip(Skip::Table)
        );
        let dml_only = Some(Published {
            actions: PubActions {
                truncate: false,
                ..ALL
            },
            ..published().unwrap_or_default()
        });
        assert_eq!(
            route(&p, Some(&table(dml_only)), Event::Truncate, unused),
            Route::Skip(Skip::Action)
        );
        let partition_via_root = TableRules {
            partition: true,
            ..table(Some(Published {
                via_root: true,
                ..published().unwrap_or_default()
            }))
        };
        assert_eq!(
            route(&p, Some(&partition_via_root), Event::Truncate, unused),
            Route::Skip(Skip::Table)
        );
        let unwanted = TableRules {
            wanted: false,
            ..table(published())
        };
        assert_eq!(
            route(&p, Some(&unwanted), Event::Truncate, unused),
            Route::Skip(Skip::Table)
        );
    }

    #[test]
    fn messages() {
        let s = session(false);
        let m = |prefix: &'static [u8]| Event::Message { prefix };
        assert_eq!(
            route(&s, None, m(b"app"), unused),
            Route::Emit(Emit::default())
        );
        // DDL capture's messages only when asked for by name.
        assert_eq!(
            route(&s, None, m(ddl::PREFIX), unused),
            Route::Skip(Skip::Action)
        );
        let named = SessionRules {
            add_msg_prefixes: vec![ddl::PREFIX.to_vec()],
            ..session(false)
        };
        assert_eq!(
            route(&named, None, m(ddl::PREFIX), unused),
            Route::Emit(Emit::default())
        );
        assert_eq!(
            route(&named, None, m(b"app"), unused),
            Route::Skip(Skip::Action)
        );
        let filtered = SessionRules {
            filter_msg_prefixes: vec![b"app".to_vec()],
            ..session(false)
        };
        assert_eq!(
            route(&filtered, None, m(b"app"), unused),
            Route::Skip(Skip::Action)
        );
        let off = SessionRules {
            messages: false,
            ..session(true)
        };
        assert_eq!(
            route(&off, None, m(b"app"), unused),
            Route::Skip(Skip::Action)
        );
        // Options parsed: messages are off by default with publications.
        let opts = Options::parse([("publication_names", Some(&b"p"[..]))]).unwrap_or_default();
        assert!(!SessionRules::new(&opts, FormatEvents::default()).messages);
    }

    #[test]
    fn ddl_tables_ignore_table_options_and_follow_publications() {
        let unwanted = TableRules {
            wanted: false,
            ..table(None)
        };
        assert_eq!(
            route(&session(false), Some(&unwanted), Event::DdlTable, unused),
            Route::Emit(Emit::default())
        );
        let p = session(true);
        assert_eq!(
            route(&p, Some(&table(None)), Event::DdlTable, unused),
            Route::Skip(Skip::Table)
        );
        let via_root = table(Some(Published {
            via_root: true,
            ..published().unwrap_or_default()
        }));
        assert_eq!(
            route(&p, Some(&via_root), Event::DdlTable, unused),
            Route::Emit(Emit {
                as_root: true,
                column_list: true,
                ..Emit::default()
            })
        );
        assert_eq!(
            route(&p, None, Event::DdlTable, unused),
            Route::Skip(Skip::Table)
        );
    }

    fn ddl_event(tables_shown: usize, drops_table: bool, dropped_from: &[Vec<u8>]) -> Event<'_> {
        Event::Ddl {
            tables_shown,
            drops_table,
            dropped_from,
        }
    }

    #[test]
    fn ddl_events() {
        assert_eq!(
            route(&session(false), None, ddl_event(0, false, &[]), unused),
            Route::Emit(Emit::default())
        );
        let p = session(true);
        assert_eq!(
            route(&p, None, ddl_event(1, false, &[]), unused),
            Route::Emit(Emit::default())
        );
        assert_eq!(
            route(&p, None, ddl_event(0, false, &[]), unused),
            Route::Skip(Skip::Table)
        );
        // A drop of a table one of the consumer's publications published.
        let from_p = [b"q".to_vec(), b"p".to_vec()];
        let from_q = [b"q".to_vec()];
        assert_eq!(
            route(&p, None, ddl_event(0, true, &from_p), unused),
            Route::Emit(Emit::default())
        );
        assert_eq!(
            route(&p, None, ddl_event(0, true, &from_q), unused),
            Route::Skip(Skip::Table)
        );
        assert_eq!(
            route(&p, None, ddl_event(0, false, &from_p), unused),
            Route::Skip(Skip::Table)
        );
        let format2 = SessionRules {
            format: FormatEvents::default(),
            ..session(false)
        };
        assert_eq!(
            route(&format2, None, ddl_event(1, false, &[]), unused),
            Route::Skip(Skip::Action)
        );
    }
}
