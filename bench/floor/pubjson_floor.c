/*
 * pubjson_floor: an output plugin that writes bytes without encoding
 * anything, for the benchmarks' floor (bench/decode_bench.py --floor).
 *
 * What PostgreSQL itself costs to hand a given number of bytes to a
 * consumer: it decodes the same WAL and replays the same transactions as
 * any plugin, and for each change appends its share of `total-bytes`
 * (spread evenly over `changes` changes, so that the total is exact) to the
 * output, handed over as pubjson's batched formats do: a message when it
 * holds `batch-bytes` or more after a change, and at each commit (a
 * transaction without changes writes nothing). The bytes are '.' and a
 * newline per change, valid text in every encoding. Not a product: the
 * tuples are not even deformed.
 *
 * A change's writes run in a memory context reset after it, as pubjson's
 * do: the SQL functions copy each message into the current context, and
 * without the reset a transaction's copies pile up until its end (where
 * rows are large, format 2 then took less time than this floor).
 */
#include "postgres.h"

#include "fmgr.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

typedef struct FloorState
{
	int64		total_bytes;
	int64		changes;
	int64		batch_bytes;
	int64		written_changes;	/* changes given their share so far */
	int64		written_bytes;
	bool		open;				/* OutputPluginPrepareWrite called */
	MemoryContext change_context;	/* reset after each change */
} FloorState;

static int64
int64_option(DefElem *elem)
{
	if (elem->arg == NULL)
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("option \"%s\" needs a value", elem->defname)));
	return pg_strtoint64(strVal(elem->arg));
}

static void
floor_startup(LogicalDecodingContext *ctx, OutputPluginOptions *opt, bool is_init)
{
	FloorState *state = MemoryContextAllocZero(ctx->context, sizeof(FloorState));
	ListCell   *option;

	state->changes = 1;
	state->batch_bytes = 65536;
	state->change_context = AllocSetContextCreate(ctx->context, "pubjson_floor change",
												  ALLOCSET_DEFAULT_SIZES);
	foreach(option, ctx->output_plugin_options)
	{
		DefElem    *elem = lfirst(option);

		if (strcmp(elem->defname, "total-bytes") == 0)
			state->total_bytes = int64_option(elem);
		else if (strcmp(elem->defname, "changes") == 0)
			state->changes = Max(int64_option(elem), 1);
		else if (strcmp(elem->defname, "batch-bytes") == 0)
			state->batch_bytes = int64_option(elem);
		else
			ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							errmsg("option \"%s\" is unknown", elem->defname)));
	}
	ctx->output_plugin_private = state;
	opt->output_type = OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
}

static void
floor_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
}

static void
floor_flush(LogicalDecodingContext *ctx, FloorState *state)
{
	if (state->open)
	{
		OutputPluginWrite(ctx, true);
		state->open = false;
	}
}

static void
floor_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, Relation rel,
			 ReorderBufferChange *change)
{
	FloorState *state = ctx->output_plugin_private;
	int64		upto = (state->total_bytes * (state->written_changes + 1)) / state->changes;
	int64		n = Max(upto - state->written_bytes, 1);
	MemoryContext outer = MemoryContextSwitchTo(state->change_context);

	if (!state->open)
	{
		OutputPluginPrepareWrite(ctx, true);
		state->open = true;
	}
	enlargeStringInfo(ctx->out, (int) n);
	memset(ctx->out->data + ctx->out->len, '.', n - 1);
	ctx->out->data[ctx->out->len + n - 1] = '\n';
	ctx->out->len += n;
	ctx->out->data[ctx->out->len] = '\0';
	state->written_changes++;
	state->written_bytes += n;
	if (state->batch_bytes == 0 || ctx->out->len >= state->batch_bytes)
		floor_flush(ctx, state);
	MemoryContextSwitchTo(outer);
	MemoryContextReset(state->change_context);
}

static void
floor_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr commit_lsn)
{
	floor_flush(ctx, ctx->output_plugin_private);
}

void
_PG_output_plugin_init(OutputPluginCallbacks *cb)
{
	cb->startup_cb = floor_startup;
	cb->begin_cb = floor_begin;
	cb->change_cb = floor_change;
	cb->commit_cb = floor_commit;
}
