//! Per-relation cache: everything the formats need about a table, read
//! from the catalogs once and reused for every change until PostgreSQL
//! invalidates it.
//!
//! Like pgoutput's RelationSyncCache, entries are dropped from relcache and
//! syscache invalidation callbacks (`invalidation.rs`), which the reorder
//! buffer fires at the right point of the change stream (catalog lookups run
//! under the historic snapshot, so an entry always describes the table as
//! it was when the change was made).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::rc::Rc;

use pgrx::pg_sys;

use crate::pg::columns::{ColumnOutput, ColumnPlans, DateSettings, ReadPlan};
use crate::pg::handles::{CacheMemory, InCallback, Rel};
use crate::pg::invalidation;
use crate::pg::port::{bms_contains, tuple_desc_attrs};
use crate::pg::publication::{build_publish_info, Publications, PublishInfo};
use crate::pg::server_encoding::server_encoding;
use pubjson_core::model::{
    ColumnDetails, ColumnMeta, RelationMeta, RelationRender, ReplicaIdentity, TypeFacts, TypeName,
    TypeRendering, UniqueIndex, ValueKind,
};
use pubjson_core::options::Options;
use pubjson_core::rules::route::{Published, TableRules};
use pubjson_core::text::json::json_string;
use pubjson_core::text::type_name::type_name_json_in;

pub struct RelationEntry {
    pub meta: RelationMeta,
    /// How each column is read.
    pub plans: ColumnPlans,
    /// The relation's side of the routing decision
    /// (`pubjson_core::rules::route`): add-tables / filter-tables, whether
    /// it is `pubjson.backfill_progress` (owned by a superuser, as the
    /// extension's is: its changes authorize backfill messages and are
    /// never emitted), how the publications publish it.
    pub rules: TableRules,
    /// With publication_names: the publications' executor state, column
    /// mask and the relation it is published as (`None`: the relation is
    /// not published). Always `None` without publication_names.
    pub publish: Option<PublishInfo>,
    /// What the format renders once for this relation.
    pub render: RelationRender,
}

/// Hashes an OID with one multiplication (SipHash, the default, costs more
/// than the rest of a lookup; OIDs need no protection from collisions).
#[derive(Default)]
pub struct OidHasher(u64);

impl Hasher for OidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub struct RelationCache {
    entries: HashMap<pg_sys::Oid, Rc<RelationEntry>, BuildHasherDefault<OidHasher>>,
    /// Where output functions and publication executor state live; a child
    /// of the decoding context, so PostgreSQL frees it with the slot's state.
    memory: pg_sys::MemoryContext,
    /// Memory of invalidated entries, freed once no callback can still be
    /// using them (at the start of the next one).
    retired: Vec<pg_sys::MemoryContext>,
    /// Settings fixed for the decoding session (they pick read plans).
    dates: DateSettings,
    /// How the session's format names, classifies and reads column types.
    types: TypeRendering,
}

impl RelationCache {
    /// The cache of a decoding session: made once, by the startup callback,
    /// from the memory context PostgreSQL gave it.
    ///
    /// # Safety
    /// `memory` is a valid memory context that outlives the cache.
    pub unsafe fn new(memory: pg_sys::MemoryContext, types: TypeRendering) -> Self {
        invalidation::register_relation_callbacks();
        // Invalidations queued for an earlier decoding session are moot.
        invalidation::clear_pending();
        RelationCache {
            entries: HashMap::default(),
            memory,
            retired: Vec::new(),
            dates: DateSettings::current(),
            types,
        }
    }

    fn retire(&mut self, entry: Rc<RelationEntry>) {
        if let Some(info) = &entry.publish {
            self.retired.push(info.memory);
        }
    }

    /// Inlined into every lookup: nothing is pending almost always.
    #[inline]
    fn apply_invalidations(&mut self) {
        if let Some(pending) = invalidation::take_pending() {
            self.invalidate(pending);
        }
    }

    /// Drops the entries of `pending` (`None`: all of them).
    #[cold]
    fn invalidate(&mut self, pending: Option<Vec<pg_sys::Oid>>) {
        match pending {
            None => {
                let entries: Vec<_> = self.entries.drain().map(|(_, e)| e).collect();
                for entry in entries {
                    self.retire(entry);
                }
            }
            Some(relids) => {
                for relid in &relids {
                    if let Some(entry) = self.entries.remove(relid) {
                        self.retire(entry);
                    }
                }
                // An entry published as an ancestor read the ancestor's
                // name for add-tables / filter-tables (`rules`): it goes
                // with the ancestor (a rename invalidates only the
                // ancestor's relcache entry).
                let dependent: Vec<pg_sys::Oid> = self
                    .entries
                    .iter()
                    .filter(|(_, e)| {
                        e.publish
                            .as_ref()
                            .is_some_and(|info| relids.contains(&info.publish_as_relid))
                    })
                    .map(|(relid, _)| *relid)
                    .collect();
                for relid in dependent {
                    if let Some(entry) = self.entries.remove(&relid) {
                        self.retire(entry);
                    }
                }
            }
        }
    }

    /// Frees the memory of invalidated entries. Call only at the start of a
    /// callback, when no entry from an earlier lookup is in use.
    pub fn collect_garbage(&mut self) {
        self.apply_invalidations();
        for memory in self.retired.drain(..) {
            // SAFETY: a context of an entry this cache no longer holds, and
            // no earlier lookup's entry is in use at the start of a callback.
            unsafe { pg_sys::MemoryContextDelete(memory) };
        }
    }

    /// The cached entry for `rel`, built on first use.
    pub fn get(
        &mut self,
        rel: Rel<'_>,
        opts: &Options,
        publications: Option<&mut Publications>,
    ) -> Rc<RelationEntry> {
        self.apply_invalidations();
        let relid = rel.oid();
        if let Some(entry) = self.entries.get(&relid) {
            return Rc::clone(entry);
        }
        let mut entry = build_entry(rel, opts, self.memory, self.dates, self.types);
        if let Some(publications) = publications {
            let memory = CacheMemory {
                context: self.memory,
                cache: PhantomData,
            };
            entry.publish = build_publish_info(rel, publications.current(), memory);
            entry.rules.published = entry.publish.as_ref().map(|info| Published {
                actions: info.actions,
                via_root: info.publish_as_relid != relid,
                wanted_as_published: if info.publish_as_relid == relid {
                    entry.rules.wanted
                } else {
                    relation_name(InCallback::of(rel), info.publish_as_relid)
                        .is_some_and(|(schema, table)| opts.table_wanted(&schema, &table))
                },
            });
        }
        let entry = Rc::new(entry);
        self.entries.insert(relid, Rc::clone(&entry));
        entry
    }
}

/// The schema and name of `relid` (a published ancestor), from the
/// syscache; `None` if it is gone.
fn relation_name(_catalog: InCallback<'_>, relid: pg_sys::Oid) -> Option<(Vec<u8>, Vec<u8>)> {
    // SAFETY: syscache lookups by OID inside a decoding callback
    // (`_catalog`); each returns NULL for a relation that does not exist,
    // else a palloc'd C string.
    unsafe {
        let table = pg_sys::get_rel_name(relid);
        let namespace = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relid));
        if table.is_null() || namespace.is_null() {
            return None;
        }
        Some((
            CStr::from_ptr(namespace).to_bytes().to_vec(),
            CStr::from_ptr(table).to_bytes().to_vec(),
        ))
    }
}

/// Copies a C string into a byte vector (empty for none).
fn cstr_bytes(s: Option<&CStr>) -> Vec<u8> {
    s.map_or_else(Vec::new, |s| s.to_bytes().to_vec())
}

fn name_bytes(name: &pg_sys::NameData) -> Vec<u8> {
    // SAFETY: NameData is a fixed-size, NUL-terminated char array.
    unsafe { CStr::from_ptr(name.data.as_ptr()) }
        .to_bytes()
        .to_vec()
}

fn value_kind(typid: pg_sys::Oid) -> ValueKind {
    match typid {
        pg_sys::INT2OID
        | pg_sys::INT4OID
        | pg_sys::INT8OID
        | pg_sys::OIDOID
        | pg_sys::FLOAT4OID
        | pg_sys::FLOAT8OID
        | pg_sys::NUMERICOID => ValueKind::Number,
        pg_sys::BOOLOID => ValueKind::Bool,
        pg_sys::BYTEAOID => ValueKind::Bytea,
        _ => ValueKind::Text,
    }
}

/// The fields of `pg_type` pubjson needs.
struct TypeInfo {
    name: Vec<u8>,
    is_domain: bool,
    base_type: pg_sys::Oid,
    base_typmod: i32,
}

fn type_info(_catalog: InCallback<'_>, typid: pg_sys::Oid) -> TypeInfo {
    // SAFETY: a syscache lookup inside a decoding callback (`_catalog`);
    // the tuple is read, then released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            pg_sys::Datum::from(typid),
        );
        if tup.is_null() {
            crate::pg::error::internal(format!("cache lookup failed for type {}", typid.to_u32()));
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_type>(tup);
        let info = TypeInfo {
            name: name_bytes(&(*form).typname),
            is_domain: (*form).typtype as u8 == b'd',
            base_type: (*form).typbasetype,
            base_typmod: (*form).typtypmod,
        };
        pg_sys::ReleaseSysCache(tup);
        info
    }
}

fn format_type(_catalog: InCallback<'_>, typid: pg_sys::Oid, typmod: i32) -> Vec<u8> {
    // SAFETY: a catalog lookup inside a decoding callback (`_catalog`);
    // format_type_extended returns a palloc'd string (or NULL), copied at once.
    unsafe {
        let p = pg_sys::format_type_extended(
            typid,
            typmod,
            pg_sys::FORMAT_TYPE_TYPEMOD_GIVEN as pg_sys::bits16,
        );
        cstr_bytes((!p.is_null()).then(|| CStr::from_ptr(p)))
    }
}

/// `pg_type`'s facts of `typid`, and its `typnotnull`.
fn type_facts(_catalog: InCallback<'_>, typid: pg_sys::Oid) -> (TypeFacts, bool) {
    // SAFETY: a syscache lookup inside a decoding callback (`_catalog`);
    // the tuple is read, then released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            pg_sys::Datum::from(typid),
        );
        if tup.is_null() {
            crate::pg::error::internal(format!("cache lookup failed for type {}", typid.to_u32()));
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_type>(tup);
        let facts = TypeFacts {
            oid: typid.to_u32(),
            name: name_bytes(&(*form).typname),
            kind: (*form).typtype as u8,
            array_input: (*form).typinput.to_u32() == pg_sys::F_ARRAY_IN,
        };
        let not_null = (*form).typnotnull;
        pg_sys::ReleaseSysCache(tup);
        (facts, not_null)
    }
}

/// The unique indexes of an open relation (its primary key's included).
fn unique_indexes(_catalog: InCallback<'_>, rel: pg_sys::Relation) -> Vec<UniqueIndex> {
    let mut found = Vec::new();
    // SAFETY: `rel` is open (a handle) inside a decoding callback
    // (`_catalog`); the index list is a copy we free; each syscache tuple
    // is read (`indkey` holds `indnatts` entries), then released.
    unsafe {
        let list = pg_sys::RelationGetIndexList(rel);
        let oids: Vec<pg_sys::Oid> = if list.is_null() {
            Vec::new()
        } else {
            (0..(*list).length)
                .map(|i| (*(*list).elements.add(i as usize)).oid_value)
                .collect()
        };
        pg_sys::list_free(list);
        for index in oids {
            let tup = pg_sys::SearchSysCache1(
                pg_sys::SysCacheIdentifier::INDEXRELID as i32,
                pg_sys::Datum::from(index),
            );
            if tup.is_null() {
                continue;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tup);
            if (*form).indisunique {
                let columns = (*form).indnatts.max(0) as usize;
                let name = pg_sys::get_rel_name(index);
                found.push(UniqueIndex {
                    name: cstr_bytes((!name.is_null()).then(|| CStr::from_ptr(name))),
                    primary: (*form).indisprimary,
                    clustered: (*form).indisclustered,
                    attnums: (*form).indkey.values.as_slice(columns).to_vec(),
                    key_columns: (*form).indnkeyatts.max(0) as usize,
                });
            }
            pg_sys::ReleaseSysCache(tup);
        }
    }
    found
}

/// The catalog's description of one column beyond its values
/// ([`ColumnDetails`]), for a format that asks for it.
fn column_details(
    catalog: InCallback<'_>,
    handle: Rel<'_>,
    attr: &pg_sys::FormData_pg_attribute,
) -> ColumnDetails {
    let (declared, type_not_null) = type_facts(catalog, attr.atttypid);
    let mut root_typmod = attr.atttypmod;
    let root = if declared.kind == b'd' {
        // SAFETY: a catalog lookup inside a decoding callback (`catalog`).
        let base = unsafe { pg_sys::getBaseTypeAndTypmod(attr.atttypid, &mut root_typmod) };
        type_facts(catalog, base).0
    } else {
        declared.clone()
    };
    ColumnDetails {
        typmod: attr.atttypmod,
        declared,
        root,
        root_typmod,
        type_not_null,
        default_expr: if attr.atthasdef {
            default_expression(handle, attr.attnum)
        } else {
            None
        },
    }
}

/// `pg_get_expr(adbin, relid)` for a column default, or `None` without one.
fn default_expression(rel: Rel<'_>, attnum: i16) -> Option<Vec<u8>> {
    let rel = rel.as_ptr();
    // SAFETY: `rel` is open (a handle): its descriptor's constraints are
    // valid; pg_get_expr is called through the fmgr as wal2json does,
    // inside the callback the handle belongs to.
    unsafe {
        let constr = (*(*rel).rd_att).constr;
        if constr.is_null() || (*constr).defval.is_null() {
            return None;
        }
        let defaults = std::slice::from_raw_parts((*constr).defval, (*constr).num_defval as usize);
        let def = defaults.iter().find(|d| d.adnum == attnum)?;
        if def.adbin.is_null() {
            return None;
        }
        let adbin = pg_sys::cstring_to_text(def.adbin);
        let text = pg_sys::OidFunctionCall2Coll(
            pg_get_expr_oid(),
            pg_sys::InvalidOid,
            pg_sys::Datum::from(adbin),
            pg_sys::Datum::from((*rel).rd_id),
        );
        let cstr = pg_sys::text_to_cstring(text.cast_mut_ptr());
        Some(cstr_bytes((!cstr.is_null()).then(|| CStr::from_ptr(cstr))))
    }
}

/// The OID of the built-in `pg_get_expr(pg_node_tree, oid)`, found by its C name.
fn pg_get_expr_oid() -> pg_sys::Oid {
    thread_local! {
        static OID: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    }
    OID.with(|cached| {
        if cached.get() == pg_sys::InvalidOid {
            // SAFETY: looks up a built-in function in fmgr's static table.
            cached.set(unsafe { pg_sys::fmgr_internal_function(c"pg_get_expr".as_ptr()) });
        }
        cached.get()
    })
}

/// Reads the catalogs and renders everything the active format needs.
fn build_entry(
    handle: Rel<'_>,
    opts: &Options,
    memory: pg_sys::MemoryContext,
    dates: DateSettings,
    types: TypeRendering,
) -> RelationEntry {
    let catalog = InCallback::of(handle);
    let rel = handle.as_ptr();
    // SAFETY: every pointer read here comes from the open relation (a
    // handle), and the catalog functions are the ones wal2json itself
    // calls in its callbacks; the bitmaps are ours to free.
    unsafe {
        let form = (*rel).rd_rel;
        let namespace = pg_sys::get_namespace_name((*form).relnamespace);
        let schema = cstr_bytes((!namespace.is_null()).then(|| CStr::from_ptr(namespace)));
        let table = name_bytes(&(*form).relname);

        // Makes sure rd_pkindex and rd_replidindex are set.
        pg_sys::list_free(pg_sys::RelationGetIndexList(rel));
        let has_primary_key = (*rel).rd_pkindex != pg_sys::InvalidOid;
        let has_identity_index = (*rel).rd_replidindex != pg_sys::InvalidOid;
        let identity = match (*form).relreplident as u8 {
            b'f' => ReplicaIdentity::Full,
            b'n' => ReplicaIdentity::Nothing,
            b'i' => ReplicaIdentity::Index,
            _ => ReplicaIdentity::Default,
        };
        let pk_attrs = if has_primary_key {
            pg_sys::RelationGetIndexAttrBitmap(
                rel,
                pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_PRIMARY_KEY,
            )
        } else {
            std::ptr::null_mut()
        };
        let identity_attrs = pg_sys::RelationGetIndexAttrBitmap(
            rel,
            pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_IDENTITY_KEY,
        );

        let unique_indexes = if types.column_details {
            unique_indexes(catalog, rel)
        } else {
            Vec::new()
        };
        let tupdesc = (*rel).rd_att;
        let natts = (*tupdesc).natts as usize;
        let attrs = tuple_desc_attrs(tupdesc);
        let mut columns = Vec::with_capacity(natts);
        let mut outputs = Vec::with_capacity(natts);
        for (attr_index, attr) in attrs.iter().enumerate() {
            if attr.attisdropped || attr.attnum <= 0 {
                outputs.push(None);
                continue;
            }
            let column_type = attr.atttypid;
            let need_type_info = opts.include_types;
            let info = if need_type_info {
                Some(type_info(catalog, column_type))
            } else {
                None
            };
            let domain_as_base =
                opts.include_domain_data_type && info.as_ref().is_some_and(|t| t.is_domain);

            let type_json = match &info {
                None => Vec::new(),
                Some(t) => type_name_json_in(
                    &match (types.name, domain_as_base) {
                        (TypeName::WithTypmod, true) => {
                            format_type(catalog, t.base_type, t.base_typmod)
                        }
                        (TypeName::WithTypmod, false) => {
                            format_type(catalog, column_type, attr.atttypmod)
                        }
                        (TypeName::Plain, true) => type_info(catalog, t.base_type).name,
                        (TypeName::Plain, false) => t.name.clone(),
                    },
                    server_encoding(),
                ),
            };

            let domain_base = match &info {
                Some(t) if t.is_domain => {
                    let mut typmod = attr.atttypmod;
                    let base = pg_sys::getBaseTypeAndTypmod(column_type, &mut typmod);
                    let name = match types.name {
                        TypeName::WithTypmod => format_type(catalog, base, typmod),
                        TypeName::Plain => type_info(catalog, base).name,
                    };
                    Some((type_name_json_in(&name, server_encoding()), base.to_u32()))
                }
                _ => None,
            };

            let value_type = match &info {
                Some(t) if domain_as_base && types.classify_domain_base => t.base_type,
                _ => column_type,
            };
            let type_oid_text = if types.signed_oid {
                (value_type.to_u32() as i32).to_string().into_bytes()
            } else {
                value_type.to_u32().to_string().into_bytes()
            };

            let default_json = if opts.include_default && attr.atthasdef && attr.attgenerated == 0 {
                default_expression(handle, attr.attnum).map(|d| json_string(&d))
            } else {
                None
            };

            columns.push(ColumnMeta {
                attr_index,
                attnum: attr.attnum,
                name_json: json_string(&name_bytes(&attr.attname)),
                type_json,
                type_oid_text,
                kind: value_kind(value_type),
                not_null: attr.attnotnull,
                default_json,
                in_primary_key: bms_contains(pk_attrs, attr.attnum),
                in_identity_key: bms_contains(identity_attrs, attr.attnum),
                is_varlena: attr.attlen == -1,
                domain_base,
                attlen: attr.attlen,
                byval: attr.attbyval,
                details: types
                    .column_details
                    .then(|| Box::new(column_details(catalog, handle, attr))),
            });
            outputs.push(Some(ColumnOutput {
                plan: ReadPlan::of(catalog, value_type, types.reads, dates, memory, false),
                finfo: crate::pg::columns::output_function(catalog, value_type, memory),
                attlen: attr.attlen,
                byval: attr.attbyval,
                is_varlena: attr.attlen == -1,
            }));
        }
        if !pk_attrs.is_null() {
            pg_sys::bms_free(pk_attrs);
        }
        if !identity_attrs.is_null() {
            pg_sys::bms_free(identity_attrs);
        }

        let wanted = opts.table_wanted(&schema, &table);
        // A look-alike in a database without the extension is owned by
        // whoever made it: only a superuser's table authorizes anything.
        let internal = schema == b"pubjson"
            && table == b"backfill_progress"
            && pg_sys::superuser_arg((*(*rel).rd_rel).relowner);
        let rules = TableRules {
            wanted,
            internal,
            partition: (*(*rel).rd_rel).relispartition,
            published: None,
        };
        RelationEntry {
            meta: RelationMeta {
                relid: (*rel).rd_id.to_u32(),
                schema_json: json_string(&schema),
                table_json: json_string(&table),
                schema,
                table,
                server_encoding: server_encoding(),
                columns,
                has_primary_key,
                has_identity_index,
                identity,
                unique_indexes,
            },
            plans: ColumnPlans {
                varlena: outputs
                    .iter()
                    .map(|o| o.as_ref().is_some_and(|o| o.is_varlena))
                    .collect(),
                outputs,
            },
            rules,
            publish: None,
            render: RelationRender::default(),
        }
    }
}
