//! Ports of PostgreSQL macros and inline functions that pgrx's bindings do
//! not provide, and catalog constants of the supported versions (15 to 18).
//! Each function states the C it stands for.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::PgList;

/// `RBTXN_IS_SERIALIZED | RBTXN_IS_SERIALIZED_CLEAR`: spilled to disk.
pub const RBTXN_SPILLED: u32 = 0x0004 | 0x0008;
/// `RBTXN_IS_STREAMED`.
pub const RBTXN_STREAMED: u32 = 0x0010;

/// `Anum_pg_publication_rel_prqual` and `_prattrs` (PostgreSQL 15–18).
pub const ANUM_PG_PUBLICATION_REL_PRQUAL: i16 = 4;
pub const ANUM_PG_PUBLICATION_REL_PRATTRS: i16 = 5;
/// `RELKIND_PARTITIONED_TABLE`.
pub const RELKIND_PARTITIONED_TABLE: u8 = b'p';

/// The HeapTuple inside a change's tuple buffer (NULL when absent): on 15
/// and 16 `change->data.tp.newtuple` is a `ReorderBufferTupleBuf`.
///
/// # Safety
/// `buf` is NULL or a valid ReorderBufferTupleBuf.
#[cfg(any(feature = "pg15", feature = "pg16"))]
pub unsafe fn change_tuple(buf: *mut pg_sys::ReorderBufferTupleBuf) -> pg_sys::HeapTuple {
    if buf.is_null() {
        std::ptr::null_mut()
    } else {
        // SAFETY: `buf` is non-NULL (checked) and, as the caller promises, a
        // valid ReorderBufferTupleBuf; `tuple` is its embedded
        // HeapTupleData, so the pointer lives as long as the buffer.
        unsafe { &mut (*buf).tuple }
    }
}

/// 17+: `change->data.tp.newtuple` is the HeapTuple itself.
///
/// # Safety
/// None beyond passing a change's tuple pointer (kept `unsafe` so both
/// versions are called alike).
#[cfg(not(any(feature = "pg15", feature = "pg16")))]
pub unsafe fn change_tuple(tuple: pg_sys::HeapTuple) -> pg_sys::HeapTuple {
    tuple
}

/// `TupleDescAttr()` for every attribute: the attributes of a tuple
/// descriptor, in order.
///
/// # Safety
/// `desc` is a valid tuple descriptor that outlives the slice.
pub unsafe fn tuple_desc_attrs<'a>(desc: pg_sys::TupleDesc) -> &'a [pg_sys::FormData_pg_attribute] {
    // SAFETY: a valid descriptor holds `natts` attributes in one array.
    unsafe {
        let natts = (*desc).natts as usize;
        #[cfg(not(feature = "pg18"))]
        let attrs = (*desc).attrs.as_slice(natts);
        // 18: the array follows the CompactAttribute array; TupleDescAttr()
        // knows where.
        #[cfg(feature = "pg18")]
        let attrs = if natts == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(pg_sys::TupleDescAttr(desc, 0), natts)
        };
        attrs
    }
}

/// `VARATT_IS_EXTERNAL_ONDISK`: a TOAST pointer the change does not carry.
///
/// # Safety
/// `datum` must point to a varlena.
pub unsafe fn is_external_ondisk(datum: pg_sys::Datum) -> bool {
    let p = datum.cast_mut_ptr::<pg_sys::varlena>();
    // SAFETY: the caller promises `p` points to a varlena, which has at
    // least its 1-byte header; the tag is read only when that header says
    // external (VARATT_IS_1B_E), i.e. a 2-byte header. Nothing else is read.
    unsafe {
        pgrx::varlena::varatt_is_1b_e(p)
            && pgrx::varlena::vartag_external(p) == pg_sys::vartag_external::VARTAG_ONDISK as u8
    }
}

/// `VARDATA_ANY` after `pg_detoast_datum_packed`: the bytes of a varlena
/// value after its header, read in place when the value is inline and
/// uncompressed (almost always; also behind the INDIRECT pointers logical
/// decoding uses for reassembled TOAST values), otherwise detoasted into a
/// copy in the current memory context.
///
/// # Safety
/// `datum` must be a non-null varlena value that outlives the slice, and
/// the current memory context must outlive it too.
pub unsafe fn varlena_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    let mut p = datum.cast_mut_ptr::<pg_sys::varlena>();
    // SAFETY: the caller promises a non-null varlena that outlives the
    // slice, and a current memory context that does too (where a detoasted
    // copy goes); pg_detoast_datum_packed() returns the value itself in
    // exactly the in-place case, so both branches agree. An INDIRECT
    // pointer's target (a TOAST value the reorder buffer reassembled for
    // this change) lives until the change has been decoded.
    unsafe {
        use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, vartag_external};
        if varatt_is_1b_e(p) && vartag_external(p) == pg_sys::vartag_external::VARTAG_INDIRECT as u8
        {
            // VARDATA_EXTERNAL: a (possibly unaligned) varatt_indirect.
            let indirect = (p as *const u8).add(2) as *const pg_sys::varatt_indirect;
            p = std::ptr::read_unaligned(indirect).pointer;
        }
        let in_place = varatt_is_4b_u(p) || (varatt_is_1b(p) && !varatt_is_1b_e(p));
        let value = if in_place {
            p
        } else {
            pg_sys::pg_detoast_datum_packed(p)
        };
        pgrx::varlena::varlena_to_byte_slice(value)
    }
}

/// `SearchSysCacheExists2`, a macro in C.
///
/// # Safety
/// Inside a transaction.
pub unsafe fn syscache_exists2(cache: u32, k1: pg_sys::Oid, k2: pg_sys::Oid) -> bool {
    // SAFETY: a plain syscache probe with OID keys, inside a transaction.
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

/// `bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, bms)`, as
/// `RelationGetIndexAttrBitmap`'s sets are offset.
///
/// # Safety
/// `bms` is NULL or a valid Bitmapset.
pub unsafe fn bms_contains(bms: *mut pg_sys::Bitmapset, attnum: i16) -> bool {
    // SAFETY: bms_is_member only reads the set (NULL is the empty set).
    !bms.is_null()
        && unsafe {
            pg_sys::bms_is_member(
                attnum as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber,
                bms,
            )
        }
}

/// The OIDs of an OID list (`foreach` with `lfirst_oid`), then
/// `list_free()` of the list.
///
/// # Safety
/// `list` is NIL or a valid OID List the caller owns.
pub unsafe fn oid_list(list: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    // SAFETY: the caller promises NIL or a valid T_OidList; PgList only
    // reads its cells.
    let oids = unsafe { PgList::<pg_sys::Oid>::from_pg(list) }
        .iter_oid()
        .collect();
    if !list.is_null() {
        // SAFETY: the caller owns the list and no longer uses it.
        unsafe { pg_sys::list_free(list) };
    }
    oids
}

/// `MaxAllocSize` (memutils.h): the largest chunk palloc() hands out, and so
/// the most a StringInfo holds.
pub const MAX_ALLOC_SIZE: usize = 0x3fff_ffff;

/// `appendBinaryStringInfo()`, without a guarded FFI call when the buffer
/// (reused from write to write) already has room, which is nearly always.
///
/// # Safety
/// `info` must be a valid StringInfo.
pub unsafe fn append_to_string_info(info: pg_sys::StringInfo, bytes: &[u8]) {
    // SAFETY: a valid StringInfo has `maxlen` bytes at `data`, `len` of them
    // used plus the terminating NUL; enlargeStringInfo makes room for
    // `bytes.len()` more (or raises an ERROR past MaxAllocSize).
    unsafe {
        let free = ((*info).maxlen - (*info).len - 1) as usize;
        if bytes.len() > free {
            pg_sys::enlargeStringInfo(info, bytes.len() as i32);
        }
        let end = (*info).data.add((*info).len as usize);
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), end, bytes.len());
        (*info).len += bytes.len() as i32;
        *end.add(bytes.len()) = 0;
    }
}

/// `MemoryContextReset()`, skipping the (guarded) call in the case where it
/// returns at once: a context with no children and no palloc since its last
/// reset has nothing to free.
///
/// # Safety
/// `memory` is a valid memory context nobody uses memory of any more.
pub unsafe fn reset_memory_context(memory: pg_sys::MemoryContext) {
    // SAFETY: plain reads of a valid context's header, then the reset the
    // contract allows.
    unsafe {
        if !(*memory).isReset || !(*memory).firstchild.is_null() {
            pg_sys::MemoryContextReset(memory);
        }
    }
}

/// `timestamptz_to_str()`: ISO style in the session time zone, copied out
/// of its static buffer.
pub fn timestamptz_text(timestamp: i64) -> Vec<u8> {
    // SAFETY: timestamptz_to_str returns a NUL-terminated static buffer,
    // copied at once before anything else can overwrite it.
    unsafe { CStr::from_ptr(pg_sys::timestamptz_to_str(timestamp)) }
        .to_bytes()
        .to_vec()
}

/// `AllocSetContextCreate(parent, name, ALLOCSET_DEFAULT_SIZES)`.
///
/// # Safety
/// `parent` is a valid memory context.
pub unsafe fn alloc_set_context(
    parent: pg_sys::MemoryContext,
    name: &'static CStr,
) -> pg_sys::MemoryContext {
    // SAFETY: `name` is static, as AllocSetContextCreate requires; the new
    // context is a child of a valid parent.
    unsafe {
        pg_sys::AllocSetContextCreateInternal(
            parent,
            name.as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        )
    }
}

/// `GetCurrentTimestamp()`.
pub fn current_timestamp() -> i64 {
    // SAFETY: reads the clock; no preconditions.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Whether transaction `xid` has rolled back (`TransactionIdDidAbort`: the
/// commit log says so; a prepared transaction, once ROLLBACK PREPARED ran).
pub fn transaction_rolled_back(xid: u32) -> bool {
    // SAFETY: a commit-log lookup, valid for any normal xid in any backend
    // that has attached shared memory; decoding callbacks run in one.
    unsafe { pg_sys::TransactionIdDidAbort(pg_sys::TransactionId::from(xid)) }
}

/// `dlist_foreach` with `dlist_container`: the elements of a doubly linked
/// list whose `dlist_node` sits at byte `node_offset` of each element.
///
/// # Safety
/// `head` is a valid dlist (a zeroed head is empty, as in `dlist_is_empty`)
/// of `T`s linked through the node at `node_offset`, unchanged while the
/// iterator is used.
pub unsafe fn dlist_elements<T>(
    head: *const pg_sys::dlist_head,
    node_offset: usize,
) -> impl Iterator<Item = *const T> {
    // SAFETY: the caller promises a valid dlist_head; its `head.next` is
    // NULL (a zeroed, empty head) or a member node or the head itself.
    let start = unsafe { (*head).head.next };
    // SAFETY: only the address of the head's own node, which a circular
    // dlist's last member points back to; nothing is read.
    let end = unsafe { &raw const (*head).head } as *mut pg_sys::dlist_node;
    let mut cur = if start.is_null() { end } else { start };
    std::iter::from_fn(move || {
        if cur == end {
            return None;
        }
        let node = cur;
        // SAFETY: `node` is a member of the list, so its `next` is valid.
        cur = unsafe { (*node).next };
        Some(
            node.cast::<u8>()
                .wrapping_sub(node_offset)
                .cast::<T>()
                .cast_const(),
        )
    })
}

/// `get_database_name(MyDatabaseId)`: the current database's name, `None`
/// outside a transaction (a walsender's startup), where the catalog
/// cannot be read.
pub fn database_name() -> Option<Vec<u8>> {
    // SAFETY: the syscache is read only inside a transaction (checked
    // first); the palloc'd name is copied at once.
    unsafe {
        if !pg_sys::IsTransactionState() {
            return None;
        }
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        (!name.is_null()).then(|| CStr::from_ptr(name).to_bytes().to_vec())
    }
}

/// `MyProcPid`.
pub fn my_pid() -> i32 {
    // SAFETY: set once when the process starts.
    unsafe { pg_sys::MyProcPid }
}
