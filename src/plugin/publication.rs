//! Publications, applied the way pgoutput applies them: which tables and
//! actions, under which ancestor a partition is published, row filters
//! (evaluated by PostgreSQL's executor) and column lists.
//!
//! Everything is looked up under the historic snapshot of the change being
//! decoded and cached per relation (see `relation.rs`); pg_publication,
//! pg_publication_rel and pg_publication_namespace invalidations drop the
//! cached decisions, so an ALTER PUBLICATION takes effect at the same point
//! of the stream as for pgoutput.

use std::cell::Cell;
use std::ffi::{c_void, CStr, CString};

use pgrx::pg_sys;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::prelude::*;

use crate::output::encoding::message_name;
use crate::plugin::column_list::{
    published_columns, Column, ColumnListError, Generated, PublicationColumns, Rules,
};
use crate::plugin::relation::invalidate_all_relations;
#[cfg(feature = "pg18")]
use crate::plugin::relation::invalidate_relation;
use crate::plugin::server_encoding::server_encoding;
use crate::plugin::tuple::tuple_desc_attrs;

/// pg_publication_rel.prqual and .prattrs (PostgreSQL 15–18).
const ANUM_PG_PUBLICATION_REL_PRQUAL: i16 = 4;
const ANUM_PG_PUBLICATION_REL_PRATTRS: i16 = 5;
const RELKIND_PARTITIONED_TABLE: u8 = b'p';

unsafe extern "C-unwind" {
    /// catalog/partition.h, not in pgrx's bindings; call through
    /// [`partition_ancestors`], which guards the FFI boundary.
    #[link_name = "get_partition_ancestors"]
    fn get_partition_ancestors_raw(relid: pg_sys::Oid) -> *mut pg_sys::List;
}

/// The partition's ancestors, parent first.
///
/// # Safety
/// `relid` is a partition; inside a transaction.
unsafe fn get_partition_ancestors(relid: pg_sys::Oid) -> *mut pg_sys::List {
    // SAFETY: an ERROR raised inside becomes a Rust panic at this boundary.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| get_partition_ancestors_raw(relid)) }
}

thread_local! {
    static PUBLICATIONS_STALE: Cell<bool> = const { Cell::new(true) };
    static CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn publication_invalidated(
    _arg: pg_sys::Datum,
    _cacheid: i32,
    _hash: u32,
) {
    PUBLICATIONS_STALE.with(|s| s.set(true));
    invalidate_all_relations();
}

#[pg_guard]
unsafe extern "C-unwind" fn publication_map_invalidated(
    _arg: pg_sys::Datum,
    _cacheid: i32,
    _hash: u32,
) {
    // No way to tell which relation a hash value belongs to: drop them all.
    invalidate_all_relations();
}

/// PostgreSQL 18 tells publication changes that affect a relation's
/// published form (e.g. a renamed publication) through its own message.
#[cfg(feature = "pg18")]
#[pg_guard]
unsafe extern "C-unwind" fn relsync_invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    invalidate_relation(relid);
}

fn register_callbacks() {
    if CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registrations of functions with the signature PostgreSQL expects.
    unsafe {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PUBLICATIONOID as i32,
            Some(publication_invalidated),
            pg_sys::Datum::from(0),
        );
        for cache in [
            pg_sys::SysCacheIdentifier::PUBLICATIONRELMAP,
            pg_sys::SysCacheIdentifier::PUBLICATIONNAMESPACEMAP,
        ] {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(publication_map_invalidated),
                pg_sys::Datum::from(0),
            );
        }
        #[cfg(feature = "pg18")]
        pg_sys::CacheRegisterRelSyncCallback(Some(relsync_invalidated), pg_sys::Datum::from(0));
    }
}

/// What a publication publishes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PubActions {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

impl PubActions {
    fn merge(&mut self, other: PubActions) {
        self.insert |= other.insert;
        self.update |= other.update;
        self.delete |= other.delete;
        self.truncate |= other.truncate;
    }
    /// The row-filtered actions, in pgoutput's order (insert, update, delete).
    fn dml(&self) -> [bool; 3] {
        [self.insert, self.update, self.delete]
    }
}

#[derive(Debug, Clone)]
pub struct PublicationInfo {
    pub oid: pg_sys::Oid,
    /// For messages (see `message_name`).
    pub name: String,
    pub all_tables: bool,
    pub via_root: bool,
    pub actions: PubActions,
    /// `publish_generated_columns = stored` (PostgreSQL 18; always false before).
    pub generated_stored: bool,
}

/// The publications named in `publication_names`, loaded lazily (as pgoutput
/// does: the first decoded change looks them up, so a missing publication is
/// reported with pgoutput's error before anything is emitted for it).
pub struct Publications {
    names: Vec<CString>,
    loaded: Vec<PublicationInfo>,
}

impl Publications {
    pub fn new(names: &[Vec<u8>]) -> Self {
        register_callbacks();
        PUBLICATIONS_STALE.with(|s| s.set(true));
        let names = names
            .iter()
            .map(|n| CString::new(n.as_slice()).unwrap_or_default())
            .collect();
        Publications {
            names,
            loaded: Vec::new(),
        }
    }

    /// The publications as of the change being decoded.
    ///
    /// # Safety
    /// Must run inside a decoding callback (historic snapshot set up).
    pub unsafe fn current(&mut self) -> &[PublicationInfo] {
        if PUBLICATIONS_STALE.with(|s| s.replace(false)) {
            self.loaded.clear();
            for name in &self.names {
                // SAFETY: GetPublicationByName raises pgoutput's error for a
                // missing publication (15-17; 18 returns NULL and pgoutput
                // warns); the result is copied at once.
                unsafe {
                    let p = pg_sys::GetPublicationByName(name.as_ptr(), MISSING_PUBLICATION_OK);
                    if p.is_null() {
                        warn_missing_publication(name);
                        continue;
                    }
                    self.loaded.push(PublicationInfo {
                        oid: (*p).oid,
                        name: message_name(name.to_bytes(), server_encoding()),
                        all_tables: (*p).alltables,
                        via_root: (*p).pubviaroot,
                        actions: PubActions {
                            insert: (*p).pubactions.pubinsert,
                            update: (*p).pubactions.pubupdate,
                            delete: (*p).pubactions.pubdelete,
                            truncate: (*p).pubactions.pubtruncate,
                        },
                        #[cfg(feature = "pg18")]
                        generated_stored: (*p).pubgencols_type
                            == pg_sys::PublishGencolsType::PUBLISH_GENCOLS_STORED,
                        #[cfg(not(feature = "pg18"))]
                        generated_stored: false,
                    });
                }
            }
        }
        &self.loaded
    }
}

/// PostgreSQL 18's pgoutput skips a publication that does not exist at
/// the decoded point of the WAL (with a WARNING); before, it is an ERROR.
const MISSING_PUBLICATION_OK: bool = cfg!(feature = "pg18");

/// pgoutput 18's WARNING for a publication it skips.
fn warn_missing_publication(name: &CStr) {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "skipped loading publication \"{}\"",
            message_name(name.to_bytes(), server_encoding())
        ),
        "pubjson",
    )
    .set_detail("The publication does not exist at this point in the WAL.")
    .set_hint("Create the publication if it does not exist.")
    .report(PgLogLevel::WARNING);
}

/// Index of a row-filtered action in [`PublishInfo::row_filters`].
pub const FILTER_INSERT: usize = 0;
pub const FILTER_UPDATE: usize = 1;
pub const FILTER_DELETE: usize = 2;

/// What the publications decide for one relation (pgoutput's RelationSyncEntry).
/// Its executor objects live in `memory`, freed by the relation cache.
pub struct PublishInfo {
    pub actions: PubActions,
    /// The relation whose name, columns and filters are used: the relation
    /// itself, or the topmost published ancestor of a partition.
    pub publish_as_relid: pg_sys::Oid,
    /// Maps the partition's columns to the ancestor's (NULL when identical).
    pub attrmap: *mut pg_sys::AttrMap,
    /// One combined (OR-ed) filter per action, NULL when that action is unfiltered.
    pub row_filters: [*mut pg_sys::ExprState; 3],
    pub estate: *mut pg_sys::EState,
    /// Names the filter in error messages.
    pub filter_context: CString,
    /// Per attribute of `publish_as_relid`: published (column list, and
    /// generated/dropped columns never are).
    pub column_mask: Vec<bool>,
    /// Slots with the relation's own descriptor, for the decoded tuples.
    pub old_slot: *mut pg_sys::TupleTableSlot,
    pub new_slot: *mut pg_sys::TupleTableSlot,
    pub memory: pg_sys::MemoryContext,
}

impl PublishInfo {
    pub fn publishes_dml(&self) -> bool {
        self.actions.insert || self.actions.update || self.actions.delete
    }
}

/// # Safety
/// `list` is NIL or a valid List of OIDs.
unsafe fn oid_list(list: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a valid OID list.
    unsafe {
        let cells = std::slice::from_raw_parts((*list).elements, (*list).length as usize);
        let oids = cells.iter().map(|c| c.oid_value).collect();
        pg_sys::list_free(list);
        oids
    }
}

/// `SearchSysCacheExists2`, a macro in C.
///
/// # Safety
/// Inside a transaction.
unsafe fn syscache_exists2(cache: u32, k1: pg_sys::Oid, k2: pg_sys::Oid) -> bool {
    // SAFETY: a plain syscache probe.
    unsafe {
        pg_sys::SearchSysCacheExists(
            cache as i32,
            pg_sys::Datum::from(k1),
            pg_sys::Datum::from(k2),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// Reads attribute `attnum` of the pg_publication_rel row of (`relid`,
/// `publication`) and converts it with `read` while the syscache entry is
/// pinned; `None` without such a row or when the attribute is NULL.
///
/// # Safety
/// Inside a transaction; `read` must copy what it keeps.
unsafe fn publication_rel_attr<R>(
    relid: pg_sys::Oid,
    publication: pg_sys::Oid,
    attnum: i16,
    read: impl FnOnce(pg_sys::Datum) -> R,
) -> Option<R> {
    // SAFETY: a syscache lookup whose tuple is released before returning.
    unsafe {
        let tuple = pg_sys::SearchSysCache2(
            pg_sys::SysCacheIdentifier::PUBLICATIONRELMAP as i32,
            pg_sys::Datum::from(relid),
            pg_sys::Datum::from(publication),
        );
        if tuple.is_null() {
            return None;
        }
        let mut isnull = true;
        let datum = pg_sys::SysCacheGetAttr(
            pg_sys::SysCacheIdentifier::PUBLICATIONRELMAP as i32,
            tuple,
            attnum,
            &mut isnull,
        );
        let result = (!isnull).then(|| read(datum));
        pg_sys::ReleaseSysCache(tuple);
        result
    }
}

/// Builds the publication decision for `rel`, or `None` when no requested
/// publication publishes it (or it is not publishable at all).
///
/// # Safety
/// `rel` is an open relation; runs in a decoding callback.
pub unsafe fn build_publish_info(
    rel: pg_sys::Relation,
    publications: &[PublicationInfo],
    parent_memory: pg_sys::MemoryContext,
) -> Option<PublishInfo> {
    // SAFETY: catalog lookups under the historic snapshot, mirroring
    // pgoutput's get_rel_sync_entry(); every object created is allocated in
    // the entry's own memory context.
    unsafe {
        if !pg_sys::is_publishable_relation(rel) {
            return None;
        }
        let relid = (*rel).rd_id;
        let pubids = oid_list(pg_sys::GetRelationPublications(relid));
        let schema_pubids = oid_list(pg_sys::GetSchemaPublications(pg_sys::get_rel_namespace(
            relid,
        )));
        let am_partition = pg_sys::get_rel_relispartition(relid);
        let relkind = pg_sys::get_rel_relkind(relid) as u8;
        let ancestors = if am_partition {
            get_partition_ancestors(relid)
        } else {
            std::ptr::null_mut()
        };
        let ancestor_oids = oid_list(pg_sys::list_copy(ancestors));

        let mut actions = PubActions::default();
        let mut publish_as_relid = relid;
        let mut publish_level = 0;
        let mut rel_publications: Vec<&PublicationInfo> = Vec::new();
        for publication in publications {
            let publish;
            let mut pub_relid = relid;
            let mut level = 0;
            if publication.all_tables {
                publish = true;
                if publication.via_root && am_partition {
                    if let Some(&top) = ancestor_oids.last() {
                        pub_relid = top;
                        level = ancestor_oids.len() as i32;
                    }
                }
            } else {
                let mut ancestor_published = false;
                if am_partition {
                    let mut ancestor_level = 0;
                    let ancestor = pg_sys::GetTopMostAncestorInPublication(
                        publication.oid,
                        ancestors,
                        &mut ancestor_level,
                    );
                    if ancestor != pg_sys::InvalidOid {
                        ancestor_published = true;
                        if publication.via_root {
                            pub_relid = ancestor;
                            level = ancestor_level;
                        }
                    }
                }
                publish = pubids.contains(&publication.oid)
                    || schema_pubids.contains(&publication.oid)
                    || ancestor_published;
            }
            // A partitioned table's changes are published through its
            // partitions, unless the publication publishes via the root.
            if !publish || (relkind == RELKIND_PARTITIONED_TABLE && !publication.via_root) {
                continue;
            }
            actions.merge(publication.actions);
            if publish_level > level {
                continue;
            }
            if publish_level < level {
                publish_as_relid = pub_relid;
                publish_level = level;
                rel_publications.clear();
            }
            rel_publications.push(publication);
        }
        if !ancestors.is_null() {
            pg_sys::list_free(ancestors);
        }
        if actions == PubActions::default() {
            return None;
        }

        let memory = pg_sys::AllocSetContextCreateInternal(
            parent_memory,
            c"pubjson publication entry".as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
        );
        let mut info = PublishInfo {
            actions,
            publish_as_relid,
            attrmap: std::ptr::null_mut(),
            row_filters: [std::ptr::null_mut(); 3],
            estate: std::ptr::null_mut(),
            filter_context: CString::default(),
            column_mask: Vec::new(),
            old_slot: std::ptr::null_mut(),
            new_slot: std::ptr::null_mut(),
            memory,
        };
        if info.publishes_dml() {
            let old = pg_sys::MemoryContextSwitchTo(memory);
            let target = if publish_as_relid == relid {
                rel
            } else {
                pg_sys::RelationIdGetRelation(publish_as_relid)
            };
            init_slots(&mut info, rel, target);
            init_row_filters(&mut info, &rel_publications, target);
            init_column_mask(&mut info, &rel_publications, target);
            if target != rel {
                pg_sys::RelationClose(target);
            }
            pg_sys::MemoryContextSwitchTo(old);
        }
        Some(info)
    }
}

/// Slots for the relation's own tuples and the map to the ancestor's layout.
///
/// # Safety
/// Both relations are open; CurrentMemoryContext is the entry's.
unsafe fn init_slots(info: &mut PublishInfo, rel: pg_sys::Relation, target: pg_sys::Relation) {
    // SAFETY: copies of the descriptor live as long as the entry's context.
    unsafe {
        let old_desc = pg_sys::CreateTupleDescCopyConstr((*rel).rd_att);
        let new_desc = pg_sys::CreateTupleDescCopyConstr((*rel).rd_att);
        info.old_slot = pg_sys::MakeSingleTupleTableSlot(old_desc, &pg_sys::TTSOpsHeapTuple);
        info.new_slot = pg_sys::MakeSingleTupleTableSlot(new_desc, &pg_sys::TTSOpsHeapTuple);
        if target != rel {
            #[cfg(feature = "pg15")]
            let attrmap = pg_sys::build_attrmap_by_name_if_req((*rel).rd_att, (*target).rd_att);
            // 16+: missing_ok = false, as pgoutput passes.
            #[cfg(not(feature = "pg15"))]
            let attrmap =
                pg_sys::build_attrmap_by_name_if_req((*rel).rd_att, (*target).rd_att, false);
            info.attrmap = attrmap;
        }
    }
}

/// pgoutput's row filter setup: per action, the filters of the publications
/// that publish it OR-ed together; a publication without a filter for the
/// table (or covering it FOR ALL TABLES / TABLES IN SCHEMA) cancels filtering
/// for the actions it publishes.
///
/// # Safety
/// `target` is open; CurrentMemoryContext is the entry's.
unsafe fn init_row_filters(
    info: &mut PublishInfo,
    publications: &[&PublicationInfo],
    target: pg_sys::Relation,
) {
    // SAFETY: syscache reads and executor setup as in pgoutput_row_filter_init().
    unsafe {
        let target_relid = (*target).rd_id;
        let schema = pg_sys::get_rel_namespace(target_relid);
        // The filters' node text holds the database's bytes (string
        // constants): kept as C strings, never converted.
        let mut filters: [Vec<CString>; 3] = Default::default();
        let mut no_filter = [false; 3];
        let mut filtering_publications = Vec::new();
        for publication in publications {
            let mut filter_text = None;
            if !publication.all_tables
                && !syscache_exists2(
                    pg_sys::SysCacheIdentifier::PUBLICATIONNAMESPACEMAP,
                    schema,
                    publication.oid,
                )
            {
                filter_text = publication_rel_attr(
                    target_relid,
                    publication.oid,
                    ANUM_PG_PUBLICATION_REL_PRQUAL,
                    |datum| {
                        let text = pg_sys::text_to_cstring(datum.cast_mut_ptr());
                        CStr::from_ptr(text).to_owned()
                    },
                );
            }
            let published = publication.actions.dml();
            match filter_text {
                None => {
                    for i in 0..3 {
                        no_filter[i] |= published[i];
                    }
                    if no_filter.iter().all(|&n| n) {
                        return;
                    }
                }
                Some(text) => {
                    filtering_publications.push(format!("\"{}\"", publication.name));
                    for i in 0..3 {
                        if published[i] && !no_filter[i] {
                            filters[i].push(text.clone());
                        }
                    }
                }
            }
        }
        if filters
            .iter()
            .zip(no_filter)
            .all(|(f, none)| f.is_empty() || none)
        {
            return;
        }

        info.estate = create_estate_for_relation(target);
        for i in 0..3 {
            if no_filter[i] || filters[i].is_empty() {
                continue;
            }
            let mut nodes: *mut pg_sys::List = std::ptr::null_mut();
            for text in &filters[i] {
                let node = pg_sys::stringToNode(text.as_ptr());
                nodes = pg_sys::lappend(nodes, node);
            }
            let expr = pg_sys::make_orclause(nodes);
            info.row_filters[i] = pg_sys::ExecPrepareExpr(expr, info.estate);
        }
        let schema_name = message_name(
            CStr::from_ptr(pg_sys::get_namespace_name(schema)).to_bytes(),
            server_encoding(),
        );
        let table_name = message_name(
            CStr::from_ptr((*(*target).rd_rel).relname.data.as_ptr()).to_bytes(),
            server_encoding(),
        );
        info.filter_context = CString::new(format!(
            "row filter of publication {} on table \"{}.{}\"",
            filtering_publications.join(", "),
            schema_name,
            table_name
        ))
        .unwrap_or_default();
    }
}

/// pgoutput's create_estate_for_relation().
///
/// # Safety
/// `rel` is open; the estate is created in CurrentMemoryContext.
unsafe fn create_estate_for_relation(rel: pg_sys::Relation) -> *mut pg_sys::EState {
    // SAFETY: builds a one-entry range table, as pgoutput does.
    unsafe {
        let estate = pg_sys::CreateExecutorState();
        let rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>())
            as *mut pg_sys::RangeTblEntry;
        (*rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
        (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
        (*rte).relid = (*rel).rd_id;
        (*rte).relkind = (*(*rel).rd_rel).relkind;
        (*rte).rellockmode = pg_sys::AccessShareLock as i32;
        let range_table = pg_sys::lappend(std::ptr::null_mut(), rte as *mut c_void);
        #[cfg(feature = "pg15")]
        pg_sys::ExecInitRangeTable(estate, range_table);
        #[cfg(not(feature = "pg15"))]
        {
            // 16+: permissions live in RTEPermissionInfo nodes.
            let mut perminfos: *mut pg_sys::List = std::ptr::null_mut();
            pg_sys::addRTEPermissionInfo(&mut perminfos, rte);
            #[cfg(any(feature = "pg16", feature = "pg17"))]
            pg_sys::ExecInitRangeTable(estate, range_table, perminfos);
            // 18: and the relations left after partition pruning (all: one).
            #[cfg(feature = "pg18")]
            pg_sys::ExecInitRangeTable(
                estate,
                range_table,
                perminfos,
                pg_sys::bms_make_singleton(1),
            );
        }
        (*estate).es_output_cid = pg_sys::GetCurrentCommandId(false);
        estate
    }
}

/// The published columns of `target` (see `column_list.rs` for the rules):
/// the attributes and each publication's column list, read from the
/// catalogs, decided by [`published_columns`].
///
/// # Safety
/// `target` is open; CurrentMemoryContext is the entry's.
unsafe fn init_column_mask(
    info: &mut PublishInfo,
    publications: &[&PublicationInfo],
    target: pg_sys::Relation,
) {
    // SAFETY: tuple descriptor reads and syscache reads as in
    // pgoutput_column_list_init(); bitmapsets are copied out at once.
    unsafe {
        let target_relid = (*target).rd_id;
        let columns: Vec<Column> = tuple_desc_attrs((*target).rd_att)
            .iter()
            .map(|a| Column {
                attnum: a.attnum,
                dropped: a.attisdropped,
                generated: match a.attgenerated as u8 {
                    0 => Generated::No,
                    b's' => Generated::Stored,
                    _ => Generated::Virtual,
                },
            })
            .collect();
        let lists: Vec<PublicationColumns> = publications
            .iter()
            .map(|publication| PublicationColumns {
                list: if publication.all_tables {
                    None
                } else {
                    publication_rel_attr(
                        target_relid,
                        publication.oid,
                        ANUM_PG_PUBLICATION_REL_PRATTRS,
                        |datum| {
                            let set = pg_sys::pub_collist_to_bitmapset(
                                std::ptr::null_mut(),
                                datum,
                                pg_sys::CurrentMemoryContext,
                            );
                            let mut attnums = Vec::new();
                            let mut member = pg_sys::bms_next_member(set, -1);
                            while member >= 0 {
                                attnums.push(member as i16);
                                member = pg_sys::bms_next_member(set, member);
                            }
                            pg_sys::bms_free(set);
                            attnums
                        },
                    )
                },
                generated_stored: publication.generated_stored,
            })
            .collect();
        match published_columns(&columns, &lists, Rules::current()) {
            Ok(mask) => info.column_mask = mask,
            Err(error) => {
                let schema = message_name(
                    CStr::from_ptr(pg_sys::get_namespace_name((*(*target).rd_rel).relnamespace))
                        .to_bytes(),
                    server_encoding(),
                );
                let table = message_name(
                    CStr::from_ptr((*(*target).rd_rel).relname.data.as_ptr()).to_bytes(),
                    server_encoding(),
                );
                let what = match error {
                    ColumnListError::DifferentColumnLists => "column lists",
                    ColumnListError::DifferentGeneratedColumns => {
                        "values of publish_generated_columns"
                    }
                };
                ereport!(
                    ERROR,
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    format!(
                        "cannot use different {what} for table \"{schema}.{table}\" in different publications"
                    )
                );
            }
        }
    }
}

/// Evaluates the row filter of `action` on `slot` (NULL counts as false).
/// An ERROR inside the filter is re-raised with its SQLSTATE and message
/// and a DETAIL naming the publication(s) and table.
///
/// # Safety
/// `slot` holds a tuple in the layout of `publish_as_relid`.
pub unsafe fn row_filter_matches(
    info: &PublishInfo,
    action: usize,
    slot: *mut pg_sys::TupleTableSlot,
) -> bool {
    let state = info.row_filters[action];
    // SAFETY: pgoutput_row_filter_exec_expr(): the per-tuple context is reset
    // and the expression evaluated on `slot` in the entry's executor state.
    let evaluate = || unsafe {
        let estate = info.estate;
        let mut econtext = (*estate).es_per_tuple_exprcontext;
        if econtext.is_null() {
            econtext = pg_sys::MakePerTupleExprContext(estate);
        } else {
            // Most filters allocate nothing: skip the (guarded) call when
            // MemoryContextReset() would do nothing either.
            let memory = (*econtext).ecxt_per_tuple_memory;
            if !(*memory).isReset || !(*memory).firstchild.is_null() {
                pg_sys::MemoryContextReset(memory);
            }
        }
        (*econtext).ecxt_scantuple = slot;
        let mut isnull = false;
        let result = pg_sys::ExecEvalExprSwitchContext(state, econtext, &mut isnull);
        !isnull && result.value() & 0xff != 0
    };
    // A PostgreSQL ERROR inside a pg_sys call reaches Rust as a panic
    // carrying a CaughtError (pgrx's FFI guard has already copied and
    // flushed the error state): catch_unwind sees it without PgTryBuilder,
    // whose boxed handler would cost an allocation per row.
    let caught = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(evaluate)) {
        Ok(matches) => return matches,
        Err(payload) => match payload.downcast::<CaughtError>() {
            Ok(caught) => *caught,
            Err(other) => std::panic::resume_unwind(other),
        },
    };
    match caught {
        CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) => {
            let context = format!(
                "While evaluating the {}.",
                info.filter_context.to_string_lossy()
            );
            let detail = match report.detail() {
                Some(detail) => format!("{detail}\n{context}"),
                None => context,
            };
            ErrorReport::new(report.sql_error_code(), report.message().to_owned(), "pubjson row filter")
                .set_detail(detail)
                .set_hint(
                    "Fix the data or the publication's WHERE clause; a change already in the WAL can only be \
                     skipped with pg_replication_slot_advance().",
                )
                .report(PgLogLevel::ERROR);
            unreachable!("ERROR does not return")
        }
        other => other.rethrow(),
    }
}
