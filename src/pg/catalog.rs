//! Catalog look-ups of the SQL functions (backfill) through the syscache
//! and the relation cache: no query to plan, nothing to JIT-compile, and
//! the same answers SQL would give.

use std::ffi::CStr;

use pgrx::pg_sys;

/// What backfill needs to know of a relation before reading it.
pub struct RelationSummary {
    /// `pg_class.relkind`.
    pub kind: u8,
    /// `pg_class.relpersistence`.
    pub persistence: u8,
    /// In `pg_catalog` or in schema `pubjson`.
    pub internal: bool,
    /// `pg_class.reltype`, the row type.
    pub row_type: pg_sys::Oid,
}

/// The relation's summary, `None` when it does not exist.
pub fn relation_summary(relid: pg_sys::Oid) -> Option<RelationSummary> {
    // SAFETY: syscache look-ups by OID; each returns 0/'\0'/InvalidOid for
    // a relation that does not exist (none raises an ERROR).
    unsafe {
        let kind = pg_sys::get_rel_relkind(relid) as u8;
        if kind == 0 {
            return None;
        }
        let namespace = pg_sys::get_rel_namespace(relid);
        let pubjson = pg_sys::get_namespace_oid(c"pubjson".as_ptr(), true);
        Some(RelationSummary {
            kind,
            persistence: pg_sys::get_rel_persistence(relid) as u8,
            internal: namespace == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE)
                || (pubjson != pg_sys::InvalidOid && namespace == pubjson),
            row_type: pg_sys::get_rel_type_id(relid),
        })
    }
}

/// The relation's name as `regclass` prints it (qualified unless visible
/// on the `search_path`, quoted where needed), in the server's encoding.
pub fn relation_name(relid: pg_sys::Oid) -> Vec<u8> {
    // SAFETY: regclassout takes an OID datum and returns a palloc'd C
    // string; it prints the number of a relation that does not exist.
    unsafe {
        let text = pgrx::direct_function_call_as_datum(
            pg_sys::regclassout,
            &[Some(pg_sys::Datum::from(relid))],
        );
        match text {
            Some(d) => CStr::from_ptr(d.cast_mut_ptr::<std::ffi::c_char>())
                .to_bytes()
                .to_vec(),
            None => relid.to_u32().to_string().into_bytes(),
        }
    }
}

/// One column of a table's key: its name quoted as an identifier, and its
/// type as `format_type` writes it, in the server's encoding.
pub struct KeyColumn {
    pub name: Vec<u8>,
    pub type_name: Vec<u8>,
}

/// The key columns of `relid`, in the index's order: those of its primary
/// key, else of its replica identity index; none when it has neither (or
/// does not exist).
pub fn key_columns(relid: pg_sys::Oid) -> Vec<KeyColumn> {
    // SAFETY: try_relation_open returns NULL for a relation that is gone,
    // else an open relation, locked AccessShare until the transaction
    // ends (as the chunk's own SELECT locks it), closed below; the index
    // list is ours to free; each pg_index tuple is read, then released.
    unsafe {
        let rel = pg_sys::try_relation_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return Vec::new();
        }
        let indexes = pg_sys::RelationGetIndexList(rel);
        let mut primary: Option<Vec<i16>> = None;
        let mut identity: Option<Vec<i16>> = None;
        for index in pgrx::PgList::<pg_sys::Oid>::from_pg(indexes).iter_oid() {
            let tup = pg_sys::SearchSysCache1(
                pg_sys::SysCacheIdentifier::INDEXRELID as i32,
                pg_sys::Datum::from(index),
            );
            if tup.is_null() {
                continue;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_index>(tup);
            let keys = (*form).indnkeyatts.max(0) as usize;
            let attnums = (*form).indkey.values.as_slice(keys).to_vec();
            if (*form).indisprimary {
                primary = Some(attnums);
            } else if (*form).indisreplident {
                identity = Some(attnums);
            }
            pg_sys::ReleaseSysCache(tup);
        }
        pg_sys::list_free(indexes);
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        primary
            .or(identity)
            .unwrap_or_default()
            .into_iter()
            // An expression (0) is no column: primary keys and replica
            // identity indexes have none.
            .filter(|&attnum| attnum > 0)
            .filter_map(|attnum| {
                let name = pg_sys::get_attname(relid, attnum, true);
                if name.is_null() {
                    return None;
                }
                let quoted = pg_sys::quote_identifier(name);
                let type_name = pg_sys::format_type_be(pg_sys::get_atttype(relid, attnum));
                Some(KeyColumn {
                    name: CStr::from_ptr(quoted).to_bytes().to_vec(),
                    type_name: CStr::from_ptr(type_name).to_bytes().to_vec(),
                })
            })
            .collect()
    }
}

/// `pg_class.relkind` of `relid`, 0 for a relation that does not exist.
pub fn relkind(relid: pg_sys::Oid) -> u8 {
    // SAFETY: a syscache lookup that returns '\0' for a missing relation.
    unsafe { pg_sys::get_rel_relkind(relid) as u8 }
}

/// The table of index `index`, `None` when it does not exist.
pub fn index_table(index: pg_sys::Oid) -> Option<pg_sys::Oid> {
    // SAFETY: a syscache lookup; missing_ok, so no ERROR.
    let table = unsafe { pg_sys::IndexGetRelation(index, true) };
    (table != pg_sys::InvalidOid).then_some(table)
}

/// The OID of extension `name`, `None` when it is not installed.
pub fn extension_oid(name: &CStr) -> Option<pg_sys::Oid> {
    // SAFETY: a catalog lookup by name; missing_ok, so no ERROR.
    let oid = unsafe { pg_sys::get_extension_oid(name.as_ptr(), true) };
    (oid != pg_sys::InvalidOid).then_some(oid)
}
