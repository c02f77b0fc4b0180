//! Publications, applied the way pgoutput applies them: which tables and
//! actions, under which ancestor a partition is published, row filters
//! (evaluated by PostgreSQL's executor) and column lists.
//!
//! Everything is looked up under the historic snapshot of the change being
//! decoded and cached per relation (see `relation.rs`); pg_publication,
//! pg_publication_rel and pg_publication_namespace invalidations drop the
//! cached decisions, so an ALTER PUBLICATION takes effect at the same point
//! of the stream as for pgoutput.

use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;

use crate::pg::error::Report;
use crate::pg::handles::{CacheMemory, Rel, SlotRow, Tuple};
use crate::pg::invalidation;
use crate::pg::port::{
    is_external_ondisk, oid_list, syscache_exists2, tuple_desc_attrs,
    ANUM_PG_PUBLICATION_REL_PRATTRS, ANUM_PG_PUBLICATION_REL_PRQUAL, RELKIND_PARTITIONED_TABLE,
};
use crate::pg::server_encoding::server_encoding;
use crate::pg::tuple::Row;
use pubjson_core::model::ChangeKind;
use pubjson_core::rules::column_list::{
    published_columns, Column, ColumnListError, Generated, PublicationColumns, Rules,
};
pub use pubjson_core::rules::route::PubActions;
use pubjson_core::rules::row_filter::{filter_verdict, FilterVerdict};
use pubjson_core::text::encoding::message_name;

unsafe extern "C-unwind" {
    /// catalog/partition.h, not in pgrx's bindings; call through
    /// [`partition_ancestors`], which guards the FFI boundary.
    #[link_name = "get_partition_ancestors"]
    fn get_partition_ancestors_raw(relid: pg_sys::Oid) -> *mut pg_sys::List;
}

/// The ancestors of `rel`, parent first (NIL for a relation that is no
/// partition), as a new OID List the caller owns.
fn partition_ancestors(rel: Rel<'_>) -> *mut pg_sys::List {
    let relid = rel.oid();
    // SAFETY: get_partition_ancestors scans pg_inherits, which needs a
    // transaction: the decoding callback's, that `rel` witnesses (Rel's
    // construction invariant); it accepts any OID, and an ERROR raised
    // inside becomes a Rust panic at the guarded boundary.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| get_partition_ancestors_raw(relid)) }
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
        invalidation::register_publication_callbacks();
        invalidation::mark_publications_stale();
        let names = names
            .iter()
            .map(|n| CString::new(n.as_slice()).unwrap_or_default())
            .collect();
        Publications {
            names,
            loaded: Vec::new(),
        }
    }

    /// The publications as of the change being decoded (called from
    /// decoding callbacks only, under their historic snapshot).
    pub fn current(&mut self) -> &[PublicationInfo] {
        if invalidation::take_publications_stale() {
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
    Report::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "skipped loading publication \"{}\"",
            message_name(name.to_bytes(), server_encoding())
        ),
    )
    .detail("The publication does not exist at this point in the WAL.")
    .hint("Create the publication if it does not exist.")
    .warning();
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

    /// Whether changes of `kind` go through a row filter.
    pub fn has_row_filter(&self, kind: ChangeKind) -> bool {
        !self.row_filters[filter_index(kind)].is_null()
    }
}

fn filter_index(kind: ChangeKind) -> usize {
    match kind {
        ChangeKind::Insert => FILTER_INSERT,
        ChangeKind::Update => FILTER_UPDATE,
        ChangeKind::Delete => FILTER_DELETE,
    }
}

/// Reads attribute `attnum` of the pg_publication_rel row of (`target`,
/// `publication`) and converts it with `read` while the syscache entry is
/// pinned; `None` without such a row or when the attribute is NULL. The
/// datum is released after `read`: what `read` keeps, it copies.
fn publication_rel_attr<R>(
    target: Rel<'_>,
    publication: pg_sys::Oid,
    attnum: i16,
    read: impl FnOnce(pg_sys::Datum) -> R,
) -> Option<R> {
    let relid = target.oid();
    // SAFETY: a syscache lookup by two OIDs, allowed inside the decoding
    // callback's transaction that `target` witnesses (Rel's construction
    // invariant); the tuple is released once, after its last use by `read`.
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

/// Witness that CurrentMemoryContext is a publication entry's own context
/// ([`PublishInfo::memory`]), so what the tuple-slot and executor calls
/// allocate now lives exactly as long as the entry. Made only by
/// [`build_publish_info`], which switches to that context for as long as
/// the witness exists.
struct InEntryMemory<'m>(PhantomData<&'m pg_sys::MemoryContextData>);

/// Builds the publication decision for `rel`, or `None` when no requested
/// publication publishes it (or it is not publishable at all). Its catalog
/// lookups mirror pgoutput's get_rel_sync_entry(), inside the decoding
/// callback that `rel` witnesses. The entry's own memory is a child of the
/// relation cache's (`parent_memory`), which deletes it when it drops the
/// entry (PostgreSQL deletes the rest with the decoding context).
pub fn build_publish_info(
    rel: Rel<'_>,
    publications: &[PublicationInfo],
    parent_memory: CacheMemory<'_>,
) -> Option<PublishInfo> {
    let relid = rel.oid();
    // SAFETY: lookups by OID in the syscache and pg_publication_rel /
    // pg_publication_namespace, allowed inside the decoding callback's
    // transaction that `rel` witnesses (Rel's construction invariant);
    // is_publishable_relation reads the open relation's rd_rel. The OID
    // lists are new and ours: oid_list frees them after reading.
    let (publishable, pubids, schema_pubids, am_partition, relkind) = unsafe {
        if !pg_sys::is_publishable_relation(rel.as_ptr()) {
            (false, Vec::new(), Vec::new(), false, 0)
        } else {
            (
                true,
                oid_list(pg_sys::GetRelationPublications(relid)),
                oid_list(pg_sys::GetSchemaPublications(pg_sys::get_rel_namespace(
                    relid,
                ))),
                pg_sys::get_rel_relispartition(relid),
                pg_sys::get_rel_relkind(relid) as u8,
            )
        }
    };
    if !publishable {
        return None;
    }
    let ancestors = if am_partition {
        partition_ancestors(rel)
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: `ancestors` is NIL or the OID List partition_ancestors just
    // returned, ours until it is freed below; oid_list frees only its copy.
    let ancestor_oids = unsafe { oid_list(pg_sys::list_copy(ancestors)) };

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
                // SAFETY: `ancestors` is the OID List of the partition's
                // ancestors (still ours, freed below); the function probes
                // the syscache for each, inside the callback's transaction
                // that `rel` witnesses.
                let ancestor = unsafe {
                    pg_sys::GetTopMostAncestorInPublication(
                        publication.oid,
                        ancestors,
                        &mut ancestor_level,
                    )
                };
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
        // SAFETY: the List partition_ancestors returned, not used any more.
        unsafe { pg_sys::list_free(ancestors) };
    }
    if actions == PubActions::default() {
        return None;
    }

    // SAFETY: `parent_memory` is the relation cache's context, valid while
    // its borrow of the cache lasts (CacheMemory's invariant); the name is a
    // static string, as AllocSetContextCreate requires.
    let memory = unsafe {
        pg_sys::AllocSetContextCreateInternal(
            parent_memory.context(),
            c"pubjson publication entry".as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
        )
    };
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
        // SAFETY: `memory` was just created; the previous context is
        // restored below, after the last use of the witness.
        let old = unsafe { pg_sys::MemoryContextSwitchTo(memory) };
        {
            let in_entry = InEntryMemory(PhantomData);
            let via_ancestor = publish_as_relid != relid;
            let target = if via_ancestor {
                // SAFETY: an ancestor found in the catalogs above exists
                // under the historic snapshot, so RelationIdGetRelation
                // opens it; it is closed below, after the last use of
                // `target`, inside this callback.
                unsafe { Rel::new(pg_sys::RelationIdGetRelation(publish_as_relid)) }
            } else {
                rel
            };
            init_slots(&mut info, rel, target, &in_entry);
            init_row_filters(&mut info, &rel_publications, target, &in_entry);
            init_column_mask(&mut info, &rel_publications, target, &in_entry);
            if via_ancestor {
                // SAFETY: the relation opened above, closed once.
                unsafe { pg_sys::RelationClose(target.as_ptr()) };
            }
        }
        // SAFETY: back to the context that was current on entry.
        unsafe { pg_sys::MemoryContextSwitchTo(old) };
    }
    Some(info)
}

/// Slots for the relation's own tuples and the map to the ancestor's layout.
fn init_slots(info: &mut PublishInfo, rel: Rel<'_>, target: Rel<'_>, _: &InEntryMemory<'_>) {
    let (rel, target) = (rel.as_ptr(), target.as_ptr());
    // SAFETY: rd_att is set for every open relation and lives as long as its
    // relcache entry (both are open: Rel's construction invariant);
    // CreateTupleDescCopyConstr copies it, and the copies, the slots and the
    // map are allocated in CurrentMemoryContext, the entry's (the witness),
    // so they live as long as the entry.
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

/// The name of schema `schema`, for messages.
fn schema_name(_: Rel<'_>, schema: pg_sys::Oid) -> String {
    // SAFETY: get_namespace_name is a syscache lookup, allowed inside the
    // decoding callback's transaction that the Rel witnesses (Rel's
    // construction invariant); it returns a palloc'd NUL-terminated copy
    // (NULL only for a schema that does not exist, and the callers pass
    // the schema of an open relation).
    unsafe {
        message_name(
            CStr::from_ptr(pg_sys::get_namespace_name(schema)).to_bytes(),
            server_encoding(),
        )
    }
}

/// The schema (`pg_class.relnamespace`) and name of an open relation.
fn relation_name(rel: Rel<'_>) -> (pg_sys::Oid, String) {
    // SAFETY: rd_rel, the pg_class row of an open relation, lives as long
    // as its relcache entry (Rel's construction invariant); relname is a
    // NUL-terminated NameData.
    unsafe {
        let form = &*(*rel.as_ptr()).rd_rel;
        let table = message_name(
            CStr::from_ptr(form.relname.data.as_ptr()).to_bytes(),
            server_encoding(),
        );
        (form.relnamespace, table)
    }
}

/// pgoutput's row filter setup: per action, the filters of the publications
/// that publish it OR-ed together; a publication without a filter for the
/// table (or covering it FOR ALL TABLES / TABLES IN SCHEMA) cancels filtering
/// for the actions it publishes.
fn init_row_filters(
    info: &mut PublishInfo,
    publications: &[&PublicationInfo],
    target: Rel<'_>,
    in_entry: &InEntryMemory<'_>,
) {
    let target_relid = target.oid();
    // SAFETY: a syscache lookup inside the callback's transaction that
    // `target` witnesses (Rel's construction invariant).
    let schema = unsafe { pg_sys::get_rel_namespace(target_relid) };
    // The filters' node text holds the database's bytes (string
    // constants): kept as C strings, never converted.
    let mut filters: [Vec<CString>; 3] = Default::default();
    let mut no_filter = [false; 3];
    let mut filtering_publications = Vec::new();
    for publication in publications {
        let mut filter_text = None;
        // SAFETY: a syscache probe by two OIDs, inside the callback's
        // transaction that `target` witnesses.
        let in_schema = !publication.all_tables
            && unsafe {
                syscache_exists2(
                    pg_sys::SysCacheIdentifier::PUBLICATIONNAMESPACEMAP,
                    schema,
                    publication.oid,
                )
            };
        if !publication.all_tables && !in_schema {
            filter_text = publication_rel_attr(
                target,
                publication.oid,
                ANUM_PG_PUBLICATION_REL_PRQUAL,
                |datum| {
                    // SAFETY: a non-NULL prqual is a `pg_node_tree`, a text
                    // varlena, pinned while `read` runs; text_to_cstring
                    // returns a palloc'd NUL-terminated copy, copied again
                    // at once.
                    unsafe {
                        let text = pg_sys::text_to_cstring(datum.cast_mut_ptr());
                        CStr::from_ptr(text).to_owned()
                    }
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

    info.estate = create_estate_for_relation(target, in_entry);
    for i in 0..3 {
        if no_filter[i] || filters[i].is_empty() {
            continue;
        }
        // SAFETY: stringToNode parses the node text pg_publication_rel
        // stores (NUL-terminated C strings); the nodes, the OR clause and
        // the prepared expression are allocated in CurrentMemoryContext,
        // the entry's (the witness), and the ExprState is bound to the
        // entry's estate made just above in that context.
        unsafe {
            let mut nodes: *mut pg_sys::List = std::ptr::null_mut();
            for text in &filters[i] {
                let node = pg_sys::stringToNode(text.as_ptr());
                nodes = pg_sys::lappend(nodes, node);
            }
            let expr = pg_sys::make_orclause(nodes);
            info.row_filters[i] = pg_sys::ExecPrepareExpr(expr, info.estate);
        }
    }
    let schema_name = schema_name(target, schema);
    let (_, table_name) = relation_name(target);
    info.filter_context = CString::new(format!(
        "row filter of publication {} on table \"{}.{}\"",
        filtering_publications.join(", "),
        schema_name,
        table_name
    ))
    .unwrap_or_default();
}

/// pgoutput's create_estate_for_relation(), in the entry's memory.
fn create_estate_for_relation(rel: Rel<'_>, _: &InEntryMemory<'_>) -> *mut pg_sys::EState {
    let (relid, rel) = (rel.oid(), rel.as_ptr());
    // SAFETY: builds a one-entry range table for an open relation, as
    // pgoutput does (its rd_rel lives as long as the relcache entry: Rel's
    // construction invariant); every node is allocated in
    // CurrentMemoryContext, the entry's (the witness), so the estate lives
    // as long as the entry.
    unsafe {
        let estate = pg_sys::CreateExecutorState();
        let rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>())
            as *mut pg_sys::RangeTblEntry;
        (*rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
        (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
        (*rte).relid = relid;
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
fn init_column_mask(
    info: &mut PublishInfo,
    publications: &[&PublicationInfo],
    target: Rel<'_>,
    _: &InEntryMemory<'_>,
) {
    // SAFETY: rd_att is set for every open relation and lives as long as
    // its relcache entry (Rel's construction invariant), longer than the
    // attributes slice, which is read at once.
    let attrs = unsafe { tuple_desc_attrs((*target.as_ptr()).rd_att) };
    let columns: Vec<Column> = attrs
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
                    target,
                    publication.oid,
                    ANUM_PG_PUBLICATION_REL_PRATTRS,
                    |datum| {
                        // SAFETY: a non-NULL prattrs is an int2vector,
                        // pinned while `read` runs, which
                        // pub_collist_to_bitmapset reads into a new set in
                        // CurrentMemoryContext; the members are copied out
                        // and the set freed at once.
                        unsafe {
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
                        }
                    },
                )
            },
            generated_stored: publication.generated_stored,
        })
        .collect();
    match published_columns(&columns, &lists, Rules::current()) {
        Ok(mask) => info.column_mask = mask,
        Err(error) => {
            let (namespace, table) = relation_name(target);
            let schema = schema_name(target, namespace);
            let what = match error {
                ColumnListError::DifferentColumnLists => "column lists",
                ColumnListError::DifferentGeneratedColumns => "values of publish_generated_columns",
            };
            Report::new(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!(
                    "cannot use different {what} for table \"{schema}.{table}\" in different publications"
                ),
            )
            .error();
        }
    }
}

/// A change's rows as the session emits them, as pgoutput_change()
/// prepares them: the decoded tuples themselves (wal2json mode, or a table
/// its publications publish as itself without a row filter), or rows in
/// slots, in the layout of the relation the change is published as (an
/// ancestor, opened here) and through the row filter's UPDATE
/// transformation. Call [`PublishedRows::release`] when done.
///
/// Invariant: in `Held::Slots`, `old` and `new` are NULL or slots holding a
/// row in `target`'s layout (the entry's own slots, or slots made here and
/// listed in `temporary_slots`), valid until `release`.
pub struct PublishedRows<'a> {
    /// The publications' rules for the relation (`None`: wal2json mode).
    info: Option<&'a PublishInfo>,
    /// The relation published as: the changed relation, or its ancestor.
    target: Rel<'a>,
    via_ancestor: bool,
    held: Held<'a>,
    temporary_slots: Vec<*mut pg_sys::TupleTableSlot>,
}

/// Where [`PublishedRows`] keeps a change's rows.
enum Held<'a> {
    /// The decoded tuples, in the changed relation's (`target`'s) layout.
    Decoded {
        old: Option<Tuple<'a>>,
        new: Option<Tuple<'a>>,
    },
    /// Slots, for the ancestor's layout and the row filter.
    Slots {
        old: *mut pg_sys::TupleTableSlot,
        new: *mut pg_sys::TupleTableSlot,
    },
}

impl<'a> PublishedRows<'a> {
    /// The rows of a change of `kind` to `rel`: kept as decoded unless
    /// `info` publishes the relation as an ancestor or filters `kind`'s
    /// rows, in which case they are stored in `info`'s slots and converted
    /// to the published relation's layout.
    pub fn new(
        info: Option<&'a PublishInfo>,
        rel: Rel<'a>,
        kind: ChangeKind,
        old: Option<Tuple<'a>>,
        new: Option<Tuple<'a>>,
    ) -> Self {
        let decoded = |via_ancestor| PublishedRows {
            info,
            target: rel,
            via_ancestor,
            held: Held::Decoded { old, new },
            temporary_slots: Vec::new(),
        };
        let Some(slots_info) = info else {
            return decoded(false);
        };
        let via_ancestor = slots_info.publish_as_relid != rel.oid();
        if !via_ancestor && !slots_info.has_row_filter(kind) {
            return decoded(false);
        }
        let mut old_slot = std::ptr::null_mut();
        let mut new_slot = std::ptr::null_mut();
        // SAFETY: the entry's slots were made (init_slots) with a copy of
        // `rel`'s descriptor, the layout of the change's tuples; they hold
        // the tuples (not copied: shouldFree = false), which live as long
        // as the change ('a), until the next change stores its own.
        unsafe {
            if let Some(old) = old {
                pg_sys::ExecStoreHeapTuple(old.as_ptr(), slots_info.old_slot, false);
                old_slot = slots_info.old_slot;
            }
            if let Some(new) = new {
                pg_sys::ExecStoreHeapTuple(new.as_ptr(), slots_info.new_slot, false);
                new_slot = slots_info.new_slot;
            }
        }
        let target = if via_ancestor {
            // SAFETY: publish_as_relid is the ancestor build_publish_info
            // found and opened under the same historic snapshot, so it
            // opens; it is closed in `release`, before 'a ends.
            unsafe { Rel::new(pg_sys::RelationIdGetRelation(slots_info.publish_as_relid)) }
        } else {
            rel
        };
        let mut temporary_slots = Vec::new();
        if !slots_info.attrmap.is_null() {
            for slot in [&mut old_slot, &mut new_slot] {
                if !slot.is_null() {
                    // SAFETY: the target's rd_att lives as long as its open
                    // relcache entry; the attribute map (built by
                    // init_slots from `rel`'s and the target's descriptors)
                    // converts the slot holding a row in `rel`'s layout into
                    // the new virtual slot, dropped in `release`.
                    unsafe {
                        let converted = pg_sys::MakeTupleTableSlot(
                            (*target.as_ptr()).rd_att,
                            &pg_sys::TTSOpsVirtual,
                        );
                        *slot = pg_sys::execute_attr_map_slot(slots_info.attrmap, *slot, converted);
                        temporary_slots.push(converted);
                    }
                }
            }
        }
        PublishedRows {
            info,
            target,
            via_ancestor,
            held: Held::Slots {
                old: old_slot,
                new: new_slot,
            },
            temporary_slots,
        }
    }

    /// The relation the change is published as.
    pub fn target(&self) -> Rel<'_> {
        self.target
    }

    /// Whether the change is published as an ancestor of its relation.
    pub fn via_ancestor(&self) -> bool {
        self.via_ancestor
    }

    /// A row of one of our slots (NULL: none).
    fn slot_row(&self, slot: *mut pg_sys::TupleTableSlot) -> Option<SlotRow<'_>> {
        // SAFETY: a non-NULL slot of Held::Slots holds a row in the
        // target's layout until `release`, which the borrow of `self`
        // outlives (the type's invariant).
        (!slot.is_null()).then(|| unsafe { SlotRow::new(slot) })
    }

    /// Runs the row filter of `kind` (none: the change is emitted as it
    /// is), with pgoutput's UPDATE transformation: an UPDATE turned INSERT
    /// then carries the new row completed with the old row's TOAST values.
    pub fn verdict(&mut self, kind: ChangeKind) -> FilterVerdict {
        let unfiltered = FilterVerdict::Emit {
            kind,
            transformed: false,
        };
        let (Some(info), Held::Slots { old, new }) = (self.info, &self.held) else {
            return unfiltered;
        };
        let (old_slot, mut filtered_new) = (*old, *new);
        let index = filter_index(kind);
        if info.row_filters[index].is_null() {
            return unfiltered;
        }
        if kind == ChangeKind::Update {
            if let (Some(old), Some(new)) = (self.slot_row(old_slot), self.slot_row(filtered_new)) {
                if let Some(merged) = self.with_old_toast_values(old, new) {
                    self.temporary_slots.push(merged);
                    filtered_new = merged;
                }
            }
        }
        let old_match = self
            .slot_row(old_slot)
            .map(|row| self.filter_matches(info, index, row));
        let new_match = self
            .slot_row(filtered_new)
            .map(|row| self.filter_matches(info, index, row));
        let verdict = filter_verdict(kind, old_match, new_match);
        if let FilterVerdict::Emit {
            kind: ChangeKind::Insert,
            transformed: true,
        } = verdict
        {
            self.held = Held::Slots {
                old: old_slot,
                new: filtered_new,
            };
        }
        verdict
    }

    /// The rows a change of `emitted` kind carries (after the verdict): an
    /// INSERT no old row, a DELETE no new one, whatever the WAL holds.
    pub fn rows(&self, emitted: ChangeKind) -> (Row<'_>, Row<'_>) {
        let (new, old) = match &self.held {
            Held::Decoded { old, new } => (
                new.map_or(Row::Absent, |t| Row::Heap(self.target, t)),
                old.map_or(Row::Absent, |t| Row::Heap(self.target, t)),
            ),
            Held::Slots { old, new } => (
                self.slot_row(*new).map_or(Row::Absent, Row::Slot),
                self.slot_row(*old).map_or(Row::Absent, Row::Slot),
            ),
        };
        match emitted {
            ChangeKind::Insert => (new, Row::Absent),
            ChangeKind::Update => (new, old),
            ChangeKind::Delete => (Row::Absent, old),
        }
    }

    /// Evaluates the row filter of `action` on `row` (NULL counts as false).
    /// An ERROR inside the filter is re-raised with its SQLSTATE and message
    /// and a DETAIL naming the publication(s) and table.
    fn filter_matches(&self, info: &PublishInfo, action: usize, row: SlotRow<'_>) -> bool {
        let state = info.row_filters[action];
        let slot = row.as_ptr();
        // SAFETY: pgoutput_row_filter_exec_expr(): `state` is non-NULL (the
        // caller checked) and was prepared in the entry's estate for the
        // layout of publish_as_relid, which `row` has (SlotRow's
        // construction invariant); the per-tuple context is the estate's,
        // reset before each row.
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
                Report::new(report.sql_error_code(), report.message())
                    .detail(detail)
                    .hint(
                        "Fix the data or the publication's WHERE clause; a change already in the WAL can only be \
                         skipped with pg_replication_slot_advance().",
                    )
                    .error()
            }
            other => other.rethrow(),
        }
    }

    /// pgoutput's handling of unchanged TOAST values before an UPDATE's new
    /// row is filtered: a replica identity column only logged in the old row
    /// is copied into a virtual copy of the new row. `None` when nothing to
    /// copy; the copy is for `temporary_slots`.
    fn with_old_toast_values(
        &self,
        old: SlotRow<'_>,
        new: SlotRow<'_>,
    ) -> Option<*mut pg_sys::TupleTableSlot> {
        let (old_slot, new_slot) = (old.as_ptr(), new.as_ptr());
        // SAFETY: both rows are in the target's layout (SlotRow's
        // construction invariant), whose rd_att lives as long as its open
        // relcache entry; slot_getallattrs deforms every attribute, so
        // tts_values and tts_isnull then hold `natts` entries each; the
        // virtual slot copies those arrays (datums that point into the
        // change's tuples, which outlive the slot).
        unsafe {
            pg_sys::slot_getallattrs(new_slot);
            pg_sys::slot_getallattrs(old_slot);
            let desc = (*self.target.as_ptr()).rd_att;
            let natts = (*desc).natts as usize;
            let attrs = tuple_desc_attrs(desc);
            let new_values = std::slice::from_raw_parts((*new_slot).tts_values, natts);
            let new_nulls = std::slice::from_raw_parts((*new_slot).tts_isnull, natts);
            let old_values = std::slice::from_raw_parts((*old_slot).tts_values, natts);
            let old_nulls = std::slice::from_raw_parts((*old_slot).tts_isnull, natts);
            let mut merged: *mut pg_sys::TupleTableSlot = std::ptr::null_mut();
            for i in 0..natts {
                if new_nulls[i] || old_nulls[i] || attrs[i].attlen != -1 {
                    continue;
                }
                if is_external_ondisk(new_values[i]) && !is_external_ondisk(old_values[i]) {
                    if merged.is_null() {
                        merged = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsVirtual);
                        pg_sys::ExecClearTuple(merged);
                        std::ptr::copy_nonoverlapping(
                            new_values.as_ptr(),
                            (*merged).tts_values,
                            natts,
                        );
                        std::ptr::copy_nonoverlapping(
                            new_nulls.as_ptr(),
                            (*merged).tts_isnull,
                            natts,
                        );
                    }
                    *(*merged).tts_values.add(i) = old_values[i];
                    *(*merged).tts_isnull.add(i) = false;
                }
            }
            if merged.is_null() {
                return None;
            }
            pg_sys::ExecStoreVirtualTuple(merged);
            Some(merged)
        }
    }

    /// Drops the temporary slots and closes the ancestor.
    pub fn release(self) {
        // SAFETY: slots made in `new`/`verdict` and the relation opened in
        // `new`, released once; nothing borrows them any more (`self` is
        // consumed, and every SlotRow borrowed it).
        unsafe {
            for slot in self.temporary_slots {
                pg_sys::ExecDropSingleTupleTableSlot(slot);
            }
            if self.via_ancestor {
                pg_sys::RelationClose(self.target.as_ptr());
            }
        }
    }
}
