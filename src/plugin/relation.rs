//! Per-relation cache: everything the formats need about a table, looked up
//! once and reused for every change until PostgreSQL invalidates it.
//!
//! Like pgoutput's RelationSyncCache, entries are dropped from relcache and
//! syscache invalidation callbacks, which the reorder buffer fires at the
//! right point of the change stream (catalog lookups run under the historic
//! snapshot, so an entry always describes the table as it was when the
//! change was made). The callbacks only queue invalidations in a
//! thread-local; the cache applies them on its next lookup, so a callback
//! that fires in the middle of building an entry can never see a
//! half-borrowed cache.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CStr;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::output::json::{json_string, type_name_json_in};
use crate::output::wal2json::{ColumnMeta, RelationMeta, ValueKind};
use crate::plugin::options::Options;
use crate::plugin::publication::{build_publish_info, Publications, PublishInfo};
use crate::plugin::server_encoding;
use crate::plugin::tuple::tuple_desc_attrs;

/// How a column's value is turned into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    Int2,
    Int4,
    Int8,
    Oid,
    Bool,
    /// text, varchar, bpchar: the output function returns the bytes unchanged.
    Text,
    /// numeric: decoded from its on-disk digits (`output/numeric.rs`).
    Numeric,
    /// jsonb: printed from its on-disk format (`output/jsonb.rs`).
    Jsonb,
    /// timestamp (`utc` false) or timestamptz (`utc` true) printed directly,
    /// chosen only when DateStyle is ISO (and the time zone UTC for timestamptz).
    Timestamp {
        utc: bool,
    },
    /// Call the type's output function.
    OutputFunction,
}

/// Output machinery of one column, indexed by attribute number - 1.
pub struct ColumnOutput {
    pub fast_path: FastPath,
    /// Output function, resolved once (boxed so its address is stable).
    pub finfo: Box<pg_sys::FmgrInfo>,
}

pub struct RelationEntry {
    pub meta: RelationMeta,
    /// Indexed by attribute index; `None` for dropped and system columns.
    pub outputs: Vec<Option<ColumnOutput>>,
    /// Passes add-tables / filter-tables.
    pub wanted: bool,
    /// With publication_names: what the publications decide (`None`: the
    /// relation is not published). Always `None` without publication_names.
    pub publish: Option<PublishInfo>,
}

#[derive(Default)]
struct PendingInvalidations {
    all: bool,
    relids: Vec<pg_sys::Oid>,
}

thread_local! {
    static PENDING: RefCell<PendingInvalidations> = RefCell::new(PendingInvalidations::default());
    /// Set whenever PENDING gets something: checking it is all a lookup
    /// costs when nothing was invalidated.
    static ANY_PENDING: Cell<bool> = const { Cell::new(false) };
    static CALLBACKS_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn relcache_invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    invalidate_relation(relid);
}

/// Queues the invalidation of one cached relation (InvalidOid: all).
pub fn invalidate_relation(relid: pg_sys::Oid) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if relid == pg_sys::InvalidOid {
            p.all = true;
        } else if !p.all {
            p.relids.push(relid);
        }
    });
    ANY_PENDING.with(|a| a.set(true));
}

#[pg_guard]
unsafe extern "C-unwind" fn syscache_invalidated(_arg: pg_sys::Datum, _cacheid: i32, _hash: u32) {
    // Types and schemas change rarely: start over.
    invalidate_all_relations();
}

/// Queues the invalidation of every cached relation.
pub fn invalidate_all_relations() {
    PENDING.with(|p| p.borrow_mut().all = true);
    ANY_PENDING.with(|a| a.set(true));
}

/// Registers the invalidation callbacks, once per backend (they cannot be
/// unregistered and PostgreSQL has a fixed number of slots for them).
pub fn register_invalidation_callbacks() {
    if CALLBACKS_REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: plain registrations of functions with the signatures
    // PostgreSQL expects; they live as long as the library is loaded.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relcache_invalidated), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            Some(syscache_invalidated),
            pg_sys::Datum::from(0),
        );
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::NAMESPACEOID as i32,
            Some(syscache_invalidated),
            pg_sys::Datum::from(0),
        );
    }
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
    /// Settings fixed for the decoding session (they pick fast paths).
    dates: DateSettings,
}

impl RelationCache {
    pub fn new(memory: pg_sys::MemoryContext) -> Self {
        // Invalidations queued for an earlier decoding session are moot.
        PENDING.with(|p| *p.borrow_mut() = PendingInvalidations::default());
        ANY_PENDING.with(|a| a.set(false));
        RelationCache {
            entries: HashMap::default(),
            memory,
            retired: Vec::new(),
            dates: DateSettings::current(),
        }
    }

    fn retire(&mut self, entry: Rc<RelationEntry>) {
        if let Some(info) = &entry.publish {
            self.retired.push(info.memory);
        }
    }

    fn apply_invalidations(&mut self) {
        if !ANY_PENDING.with(|a| a.replace(false)) {
            return;
        }
        let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
        if pending.all {
            let entries: Vec<_> = self.entries.drain().map(|(_, e)| e).collect();
            for entry in entries {
                self.retire(entry);
            }
        } else {
            for relid in pending.relids {
                if let Some(entry) = self.entries.remove(&relid) {
                    self.retire(entry);
                }
            }
        }
    }

    /// Frees the memory of invalidated entries. Call only at the start of a
    /// callback, when no entry from an earlier lookup is in use.
    pub fn collect_garbage(&mut self) {
        self.apply_invalidations();
        for memory in self.retired.drain(..) {
            // SAFETY: a context this cache created and no longer references.
            unsafe { pg_sys::MemoryContextDelete(memory) };
        }
    }

    /// The cached entry for `rel`, built on first use.
    ///
    /// # Safety
    /// `rel` must be a valid open relation handed to a decoding callback.
    pub unsafe fn get(
        &mut self,
        rel: pg_sys::Relation,
        opts: &Options,
        publications: Option<&mut Publications>,
    ) -> Rc<RelationEntry> {
        self.apply_invalidations();
        // SAFETY: the caller guarantees `rel` is valid.
        let relid = unsafe { (*rel).rd_id };
        if let Some(entry) = self.entries.get(&relid) {
            return Rc::clone(entry);
        }
        // SAFETY: as above; building only reads the catalogs.
        let mut entry = unsafe { build_entry(rel, opts, self.memory, self.dates) };
        if let Some(publications) = publications {
            // SAFETY: as above.
            entry.publish = unsafe { build_publish_info(rel, publications.current(), self.memory) };
        }
        let entry = Rc::new(entry);
        self.entries.insert(relid, Rc::clone(&entry));
        entry
    }
}

/// Copies a C string into a byte vector (empty for NULL).
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn cstr_bytes(p: *const std::ffi::c_char) -> Vec<u8> {
    if p.is_null() {
        Vec::new()
    } else {
        // SAFETY: non-NULL and NUL-terminated per the contract.
        unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()
    }
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

/// The session settings the timestamp fast path depends on.
#[derive(Debug, Clone, Copy)]
pub struct DateSettings {
    /// `DateStyle` is ISO.
    pub iso: bool,
    /// The session time zone has a constant zero offset.
    pub utc: bool,
}

impl DateSettings {
    /// Reads the decoding session's DateStyle and TimeZone.
    pub fn current() -> Self {
        // SAFETY: plain reads of GUC globals and the zone's name.
        unsafe {
            let iso = pg_sys::DateStyle == pg_sys::USE_ISO_DATES as i32;
            let name = pg_sys::pg_get_timezone_name(pg_sys::session_timezone);
            let utc = !name.is_null()
                && matches!(
                    CStr::from_ptr(name).to_bytes(),
                    b"UTC" | b"Etc/UTC" | b"Etc/Universal" | b"Universal" | b"Zulu" | b"Etc/Zulu"
                );
            DateSettings { iso, utc }
        }
    }
}

fn fast_path(typid: pg_sys::Oid, dates: DateSettings) -> FastPath {
    match typid {
        pg_sys::TIMESTAMPOID if dates.iso => FastPath::Timestamp { utc: false },
        pg_sys::TIMESTAMPTZOID if dates.iso && dates.utc => FastPath::Timestamp { utc: true },
        pg_sys::INT2OID => FastPath::Int2,
        pg_sys::INT4OID => FastPath::Int4,
        pg_sys::INT8OID => FastPath::Int8,
        pg_sys::OIDOID => FastPath::Oid,
        pg_sys::BOOLOID => FastPath::Bool,
        pg_sys::TEXTOID | pg_sys::VARCHAROID | pg_sys::BPCHAROID => FastPath::Text,
        pg_sys::NUMERICOID => FastPath::Numeric,
        pg_sys::JSONBOID => FastPath::Jsonb,
        _ => FastPath::OutputFunction,
    }
}

/// The fields of `pg_type` pubjson needs.
struct TypeInfo {
    name: Vec<u8>,
    is_domain: bool,
    base_type: pg_sys::Oid,
    base_typmod: i32,
}

/// # Safety
/// Must run inside a transaction (decoding callbacks do).
unsafe fn type_info(typid: pg_sys::Oid) -> TypeInfo {
    // SAFETY: syscache lookup; the tuple is released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            pg_sys::Datum::from(typid),
        );
        if tup.is_null() {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("cache lookup failed for type {}", typid.to_u32())
            );
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

/// # Safety
/// Must run inside a transaction.
unsafe fn format_type(typid: pg_sys::Oid, typmod: i32) -> Vec<u8> {
    // SAFETY: format_type_extended returns a palloc'd string, copied at once.
    unsafe {
        let p = pg_sys::format_type_extended(
            typid,
            typmod,
            pg_sys::FORMAT_TYPE_TYPEMOD_GIVEN as pg_sys::bits16,
        );
        cstr_bytes(p)
    }
}

/// `pg_get_expr(adbin, relid)` for a column default, or `None` without one.
///
/// # Safety
/// `rel` must be a valid relation.
unsafe fn default_expression(rel: pg_sys::Relation, attnum: i16) -> Option<Vec<u8>> {
    // SAFETY: reads the relation's tuple descriptor constraints, then calls
    // pg_get_expr through the fmgr as wal2json does.
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
        Some(cstr_bytes(cstr))
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

/// # Safety
/// `bms` is NULL or a valid Bitmapset.
unsafe fn bms_contains(bms: *mut pg_sys::Bitmapset, attnum: i16) -> bool {
    // SAFETY: bms_is_member accepts NULL.
    !bms.is_null()
        && unsafe {
            pg_sys::bms_is_member(
                attnum as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber,
                bms,
            )
        }
}

/// Reads the catalogs and renders everything the active format needs.
///
/// # Safety
/// `rel` must be a valid open relation; runs inside the decoding transaction.
unsafe fn build_entry(
    rel: pg_sys::Relation,
    opts: &Options,
    memory: pg_sys::MemoryContext,
    dates: DateSettings,
) -> RelationEntry {
    // SAFETY: every pointer read here comes from the open relation, and the
    // catalog functions are the ones wal2json itself calls in its callbacks.
    unsafe {
        let form = (*rel).rd_rel;
        let schema = cstr_bytes(pg_sys::get_namespace_name((*form).relnamespace));
        let table = name_bytes(&(*form).relname);

        // Makes sure rd_pkindex and rd_replidindex are set.
        pg_sys::list_free(pg_sys::RelationGetIndexList(rel));
        let has_primary_key = (*rel).rd_pkindex != pg_sys::InvalidOid;
        let has_identity_index = (*rel).rd_replidindex != pg_sys::InvalidOid;
        let identity_full = (*form).relreplident as u8 == b'f';
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
                Some(type_info(column_type))
            } else {
                None
            };
            let domain_as_base =
                opts.include_domain_data_type && info.as_ref().is_some_and(|t| t.is_domain);

            let type_json = match &info {
                None => Vec::new(),
                Some(t) => type_name_json_in(
                    &if opts.format_version == 1 {
                        match (domain_as_base, opts.include_typmod) {
                            (true, true) => format_type(t.base_type, t.base_typmod),
                            (true, false) => type_info(t.base_type).name,
                            (false, true) => format_type(column_type, attr.atttypmod),
                            (false, false) => t.name.clone(),
                        }
                    } else if domain_as_base {
                        format_type(t.base_type, t.base_typmod)
                    } else {
                        format_type(column_type, attr.atttypmod)
                    },
                    server_encoding::server_encoding(),
                ),
            };

            // Format 1 classifies (and prints the OID of) the domain's base
            // type when include-domain-data-type applies; format 2 never does.
            let (value_type, type_oid_text) = if opts.format_version == 1 {
                let t = if domain_as_base {
                    info.as_ref().map_or(column_type, |i| i.base_type)
                } else {
                    column_type
                };
                (t, t.to_u32().to_string().into_bytes())
            } else {
                (
                    column_type,
                    (column_type.to_u32() as i32).to_string().into_bytes(),
                )
            };

            let default_json = if opts.include_default && attr.atthasdef && attr.attgenerated == 0 {
                default_expression(rel, attr.attnum).map(|d| json_string(&d))
            } else {
                None
            };

            let mut output_fn = pg_sys::InvalidOid;
            let mut is_varlena_out = false;
            pg_sys::getTypeOutputInfo(value_type, &mut output_fn, &mut is_varlena_out);
            let mut finfo = Box::new(pg_sys::FmgrInfo::default());
            pg_sys::fmgr_info_cxt(output_fn, &mut *finfo, memory);

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
            });
            outputs.push(Some(ColumnOutput {
                fast_path: fast_path(value_type, dates),
                finfo,
            }));
        }
        if !pk_attrs.is_null() {
            pg_sys::bms_free(pk_attrs);
        }
        if !identity_attrs.is_null() {
            pg_sys::bms_free(identity_attrs);
        }

        let wanted = opts.table_wanted(&schema, &table);
        RelationEntry {
            meta: RelationMeta {
                schema_json: json_string(&schema),
                table_json: json_string(&table),
                schema,
                table,
                server_encoding: server_encoding::server_encoding(),
                columns,
                has_primary_key,
                has_identity_index,
                identity_full,
                v2_columns: Default::default(),
                v1_arrays: Default::default(),
            },
            outputs,
            wanted,
            publish: None,
        }
    }
}
