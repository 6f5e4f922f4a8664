/*
 * run.c - execute a compiled program: each step in order, a generated
 * kernel called with the table of value pointers, or a fallback handed back
 * to the client (which runs it through torch and fills in its results'
 * pointers).  Arena values get their pointers here; everything else the
 * client has filled in.  It reads the Program alone (program.c), never the
 * graph it was compiled from, and calls no pass or builder: a CUDA kernel's
 * unaligned variant comes from the program (program_unaligned_fn).
 *
 * Kernels never trap on bad data: an integer division by zero or a gather's
 * index out of range is recorded in a flag of the kernel library and the
 * kernel goes on in bounds; the flag is read here and becomes torch's error.
 * On the CPU after each kernel.  On CUDA the index record is on the device:
 * it is copied back at the end of a run (a wait for the stream), and before
 * a fallback where a kernel that checks indices ran since it was last read,
 * and not at all while the stream is being captured into a CUDA graph, whose
 * replays ember_program_check checks.
 *
 * That wait keeps the host's work for the next call from overlapping the
 * GPU, so it is not the default: the check is asynchronous, as torch's and
 * Inductor's device-side asserts are.  A kernel that meets an index out of
 * range writes it to host-mapped memory and traps, which stops the CUDA
 * context (torch's next synchronizing call raises a CUDA error), and this
 * program's next run or check raises the IndexError naming the op and node
 * from that memory, before touching the device.  The wait cost host-bound
 * models up to a fifth of their step.  The cuda_index_wait option (EMBER_CUDA_INDEX_WAIT=1) keeps the
 * waiting check, whose error leaves the process usable, as
 * CUDA_LAUNCH_BLOCKING=1 does for torch's asserts.
 *
 * Threads: a run's own state is the client's pointer table.  What a run
 * changes in the program is shared by every run of it: the CPU library's
 * error flags (one per loaded object), the error message (p->err), the
 * device's index record of the waiting check, and the unaligned variants a
 * CUDA launch may build (under a lock in program.c, with the report's
 * counts of them).  So the client keeps two runs of one program from
 * executing steps at the same time; only inside a fallback may another run
 * go on.  The CPython binding does that with the GIL, which a run holds
 * except in its fallbacks.  The waiting check reads the device's record
 * before a fallback too, where a kernel that checks indices ran since it
 * was last read: a record is then always read by the run whose kernel
 * wrote it, even with another run on another stream in between.  The
 * asynchronous check's record in host memory is only read, atomically.
 */
#include <stdint.h>
#include <string.h>

#include "ember_int.h"

/* A kernel's launch: its pointers, then in a symbolic program the call's
   size variables (codegen_cuda.c's signature), on the grid and block of the
   kernel or (k->sgrid, k->sblock) of the call's sizes.  The variant with the
   unaligned path runs where a vector access's pointer is not aligned, or
   in a symbolic program where a size the vector paths need 4 to divide is
   not a multiple of 4 (k->svec); the one with 64-bit indices where an
   index at the call's sizes passes 32 bits (k->swide), whatever else.  A kernel of several bodies runs the entry
   point of the body the call's sizes choose (k->sbody), in either. */
static int launch(Program *p, int kid, void **ptrs, void *stream) {
  const PKernel *k = &p->kernels[kid];
  if (k->grid[0] == 0) return EMBER_OK;  /* nothing to do: an empty space */
  void *args[256 + EMBER_MAX_SYMS];
  if (k->nparams > 256) return program_error(p, -1, "kernel ember_k%d has too many arguments", kid);
  for (int i = 0; i < k->nparams; i++) args[i] = &ptrs[k->params[i]];
  unsigned grid[3] = {k->grid[0], k->grid[1], k->grid[2]}, block[3] = {k->block[0], k->block[1], k->block[2]};
  int aligned = 1, body = 0, variant = EM_MAIN;
  if (p->nsyms) {  /* ember_program_run_sized put the sizes after the values' pointers */
    const int64_t *syms = ptrs[p->nvalues];
    for (int i = 0; i < p->nsyms; i++) args[k->nparams + i] = (void *)&syms[i];
    if (k->sgrid) {
      int64_t gx = ex_eval(k->sgrid, NULL, syms);
      if (gx <= 0) return EMBER_OK;  /* no output point at these sizes */
      grid[0] = (unsigned)gx;
    }
    if (k->sbody) {
      int64_t b = ex_eval(k->sbody, NULL, syms);
      if (b < 0 || b >= k->nbodies)
        return program_error(p, -1, "kernel ember_k%d's body %lld at these sizes is not one of its %d", kid,
                             (long long)b, k->nbodies);
      body = (int)b;
    }
    if (k->sblock) {  /* codegen_cuda.c makes it a multiple of 32, at most the body's bound */
      int64_t bx = ex_eval(k->sblock, NULL, syms);
      if (bx < 32 || bx > (int64_t)k->bblock[body])
        return program_error(p, -1, "kernel ember_k%d's block of %lld threads at these sizes is out of range", kid,
                             (long long)bx);
      block[0] = (unsigned)bx;
    }
    if (k->svec && k->nalign) aligned = ex_eval(k->svec, NULL, syms) == 0;
    if (k->swide && ex_eval(k->swide, NULL, syms) >= EM_INDEX32_LIM) variant = EM_WIDE;
  }
  /* the vector accesses' pointers: where one is not aligned, the kernel's
     variant with its unaligned path (compiled at the first such launch) */
  void *fn = p->kfn[kid * MAX_BODIES + body];
  for (int i = 0; i < k->nalign && aligned && !variant; i++) {
    const AlignCheck *a = &k->align[i];
    aligned = ((uintptr_t)ptrs[a->v] + (uintptr_t)a->off) % (uintptr_t)a->mod == 0;
  }
  if (!aligned && !variant) variant = EM_UNALIGNED;
  if (variant && !(fn = program_variant_fn(p, kid, body, variant, stream))) return EMBER_ERUN;
  char err[1024], name[48];
  if (cuda_launch(fn, grid, block, 0, stream, args, err, sizeof err)) {
    em_entry_name(name, sizeof name, kid, variant, body);
    snprintf(p->err, sizeof p->err, "ember: CUDA kernel %s (computing %s) failed: %s", name, k->what, err);
    return EMBER_ERUN;
  }
  return EMBER_OK;
}

/* The kernels' record {code, index} of an index out of range as the error
   torch raises (IndexError), naming the op and node; kid: the kernel, if
   known (else -1). */
static int index_error(Program *p, int kid, int64_t code, int64_t i) {
  const PIndexCode *c = NULL;
  for (int j = 0; j < p->nicodes && !c; j++)
    if (p->icodes[j].code == code) c = &p->icodes[j];
  if (!c) {
    snprintf(p->err, sizeof p->err, "ember: a kernel reported an index out of range with an unknown code %lld",
             (long long)code);
    return EMBER_ERUN;
  }
  const PNode *n = &p->nodes[c->node];
  char where[64] = "";
  if (kid >= 0) snprintf(where, sizeof where, ", in kernel ember_k%d", kid);
  char size[40] = "";  /* unknown here in a symbolic program: the call's size */
  if (c->size >= 0) snprintf(size, sizeof size, " with size %lld", (long long)c->size);
  snprintf(p->err, sizeof p->err, "index %lld is out of bounds for dimension %d%s (%s, node %s%s)",
           (long long)i, c->dim, size, n->op, n->name, where);
  return EMBER_EINDEX;
}

/* A library step: the cuBLASLt matmul (or cuBLAS sgemm) of kernel k's one
   item, on stream, with the arena's workspace.  An operand may be a view:
   its pointer is its root's plus the offset between them (in a symbolic
   program, the offsets' expressions at the call's sizes). */
static void *value_ptr(const Program *p, void **ptrs, int vid) {
  const PValue *v = &p->values[vid];
  int64_t delta = v->root_delta;
  if (v->sx) {
    const int64_t *syms = ptrs[p->nvalues];
    const PValue *r = &p->values[v->root];
    delta = ex_eval(v->sx[2 * v->ndim], NULL, syms) - (r->sx ? ex_eval(r->sx[2 * r->ndim], NULL, syms) : r->offset);
  }
  return (char *)ptrs[v->root] + delta * v->elsize;
}

static int matmul_failed(Program *p, const PCall *c, const char *what, const char *err) {
  snprintf(p->err, sizeof p->err, "ember: %s for %s (%s) failed%s: %s", c->what, p->nodes[c->node].name,
           p->nodes[c->node].op, what, err);
  return EMBER_ERUN;
}

/* run_matmul in a symbolic program: m, n, k, batch, the leading dims and
   batch strides evaluated at the call's sizes (c->sx, lower.c's
   lower_matmul_sym), the operands read and the result written in place. */
static int run_matmul_sym(Program *p, const PCall *c, void **ptrs, void *arena, void *stream) {
  const int64_t *syms = ptrs[p->nvalues];
  int64_t x[MM_NSX];
  for (int i = 0; i < MM_NSX; i++) x[i] = ex_eval(c->sx[i], NULL, syms);
  const void *bias = c->bias >= 0 ? value_ptr(p, ptrs, c->bias) : NULL;
  char err[1024];
  if (blas_matmul(c->dtype, c->ta, c->tb, x[MM_M], x[MM_N], x[MM_K], value_ptr(p, ptrs, c->a), x[MM_LDA],
                  x[MM_SA], value_ptr(p, ptrs, c->b), x[MM_LDB], x[MM_SB], value_ptr(p, ptrs, c->out), x[MM_LDC],
                  x[MM_SC], x[MM_BATCH], bias, c->epi, c->api, (char *)arena + p->ws_off, p->ws_bytes, stream, err,
                  sizeof err))
    return matmul_failed(p, c, "", err);
  return EMBER_OK;
}

/* The call writes c->out: its own result, or (bias and activation folded
   into its epilogue by lower.c) the last folded node's, laid out alike.  A
   matrix with a padded copy (lower.c, matmul_pad) is copied into the call's
   scratch before it (an operand) or out of it after (the result): ms, at
   `rows` rows of A and the result. */
static int matmul_padded(Program *p, const PCall *c, const MatStore *ms, int64_t rows, char *scratch, void **ptrs,
                         void *arena, void *stream) {
  const void *bias = c->bias >= 0 ? value_ptr(p, ptrs, c->bias) : NULL;
  int64_t es = (int64_t)p->values[c->out].elsize;
  void *ptr[3] = {value_ptr(p, ptrs, c->a), value_ptr(p, ptrs, c->b), value_ptr(p, ptrs, c->out)};
  void *at[3] = {ptr[0], ptr[1], ptr[2]};  /* what the call reads and writes */
  int64_t ld[3], bs[3];
  char err[1024];
  const char *what = "";
  for (int i = 0; i < 3; i++) {
    const MatStore *m = &ms[i];
    ld[i] = m->ld, bs[i] = m->bstride;
    if (!m->pad) continue;
    at[i] = scratch + m->off;
    ld[i] = m->pad, bs[i] = m->bstride ? m->crows * m->pad : 0;
    if (i == 2) continue;
    /* one copy of every batch's rows, or (more rows in the copy) one per batch */
    int64_t per = m->crows == m->rows ? m->nb : 1;
    for (int64_t b = 0; b < m->nb; b += per)
      if (cuda_copy2d_async((char *)at[i] + b * bs[i] * es, (size_t)(m->pad * es),
                            (const char *)ptr[i] + b * m->bstride * es, (size_t)(m->ld * es), (size_t)(m->len * es),
                            (size_t)(per * m->rows), stream, err, sizeof err)) {
        what = i ? " (copying B to its padded copy)" : " (copying A to its padded copy)";
        goto fail;
      }
  }
  if (blas_matmul(c->dtype, c->ta, c->tb, rows, c->n, c->k, at[0], ld[0], bs[0], at[1], ld[1], bs[1], at[2], ld[2],
                  bs[2], c->batch, bias, c->epi, c->api, (char *)arena + p->ws_off, p->ws_bytes, stream, err,
                  sizeof err))
    goto fail;
  if (ms[2].pad && cuda_copy2d_async(ptr[2], (size_t)(ms[2].ld * es), at[2], (size_t)(ms[2].pad * es),
                                     (size_t)(ms[2].len * es), (size_t)(ms[2].nb * ms[2].rows), stream, err,
                                     sizeof err)) {
    what = " (copying the result out of its padded copy)";
    goto fail;
  }
  return EMBER_OK;
fail:
  return matmul_failed(p, c, what, err);
}

/* In a symbolic program the sizes, leading dims and batch strides are the
   call's (c->sx at the size variables); a call lower.c padded (one matrix,
   n, k and the padded matrices' leading dims constants) runs through its
   copies where its result is large enough at the call's m, in a scratch
   after the arena's values (program_sym_scratch), else in place. */
static int run_matmul(Program *p, const PKernel *k, void **ptrs, void *arena, void *stream) {
  const PCall *c = &p->calls[k->call];
  if (!c->sx) return matmul_padded(p, c, c->ms, c->m, (char *)arena + k->scratch_off, ptrs, arena, stream);
  const int64_t *syms = ptrs[p->nvalues];
  if (!program_sym_pad_bytes(p, c, syms)) return run_matmul_sym(p, c, ptrs, arena, stream);
  MatStore ms[3];
  memcpy(ms, c->ms, sizeof ms);
  int64_t m = ex_eval(c->sx[MM_M], NULL, syms);
  ms[0].ld = ex_eval(c->sx[MM_LDA], NULL, syms), ms[0].bstride = ex_eval(c->sx[MM_SA], NULL, syms);
  ms[2].rows = ms[2].crows = m;
  return matmul_padded(p, c, ms, m, (char *)arena + program_sym_scratch(p, syms), ptrs, arena, stream);
}

/* A CPU program's library step: the BLAS call (blas_cpu.c) on the
   operands in place, at the call's sizes in a symbolic program.  Nothing is
   padded on the CPU (lower.c), so c->ms holds the leading dims and batch
   strides as stored. */
static int run_matmul_cpu(Program *p, const PKernel *k, void **ptrs) {
  const PCall *c = &p->calls[k->call];
  int64_t x[MM_NSX] = {c->m, c->n, c->k, c->batch, c->ms[0].ld, c->ms[1].ld, c->ms[2].ld,
                       c->ms[0].bstride, c->ms[1].bstride, c->ms[2].bstride};
  if (c->sx) {
    const int64_t *syms = ptrs[p->nvalues];
    for (int i = 0; i < MM_NSX; i++) x[i] = ex_eval(c->sx[i], NULL, syms);
  }
  char err[512];
  if (blas_cpu_matmul(c->dtype, c->ta, c->tb, x[MM_M], x[MM_N], x[MM_K], value_ptr(p, ptrs, c->a), x[MM_LDA],
                      x[MM_SA], value_ptr(p, ptrs, c->b), x[MM_LDB], x[MM_SB], value_ptr(p, ptrs, c->out),
                      x[MM_LDC], x[MM_SC], x[MM_BATCH], err, sizeof err))
    return matmul_failed(p, c, "", err);
  return EMBER_OK;
}

int run_check_index(Program *p, void *stream) {
  if (p->index_host) {  /* asynchronous: what a trapped kernel wrote, no waiting */
    int64_t code = __atomic_load_n(&p->index_host[0], __ATOMIC_ACQUIRE);
    if (!code) return EMBER_OK;
    int rc = index_error(p, -1, code, __atomic_load_n(&p->index_host[1], __ATOMIC_ACQUIRE));
    size_t l = strlen(p->err);
    if (l + 1 < sizeof p->err)
      snprintf(p->err + l, sizeof p->err - l, "; found on the device in an earlier call, whose kernel stopped the "
               "CUDA context as torch's device-side assert does: restart the process (the option "
               "cuda_index_wait, EMBER_CUDA_INDEX_WAIT=1, checks after each call instead, slower)");
    return rc;
  }
  if (p->target != EMBER_CUDA || !p->index_checks || !p->index_dev) return EMBER_OK;
  int64_t rec[2] = {0, 0};
  char err[512];
  if (cuda_read_sync(rec, p->index_dev, sizeof rec, stream, err, sizeof err)) {
    snprintf(p->err, sizeof p->err, "ember: reading the kernels' index check failed: %s", err);
    return EMBER_ERUN;
  }
  if (!rec[0]) return EMBER_OK;
  if (cuda_memset_async(p->index_dev, 0, sizeof rec, stream, err, sizeof err)) {
    snprintf(p->err, sizeof p->err, "ember: clearing the kernels' index check failed: %s", err);
    return EMBER_ERUN;
  }
  return index_error(p, -1, rec[0], rec[1]);
}

/* The waiting check (CUDA, no host-mapped record): the device's record read
   now, a wait for the stream; not while the stream is being captured into a
   CUDA graph (ember_program_check reads a replay's). */
static int check_waiting(Program *p, void *stream) {
  int capturing = 1;  /* unknown (the query failed): no waiting */
  if (cuda_capturing(stream, &capturing, NULL, 0) == 0 && !capturing) return run_check_index(p, stream);
  return EMBER_OK;
}

int run_program(Program *p, void **ptrs, void *arena, void *stream, ember_fallback_fn fb, void *ctx) {
  if (p->build_only && p->nkernels > 0) {
    snprintf(p->err, sizeof p->err, "ember: this program was compiled with build_only and cannot run");
    return EMBER_ERUN;
  }
  if (p->index_host) {  /* an earlier run's kernel trapped: say which index, before anything fails */
    int rc = run_check_index(p, stream);
    if (rc) return rc;
  }
  if (!arena && p->arena_bytes && !p->nsyms) {  /* symbolic: ember_program_run_sized checks at the call's sizes */
    snprintf(p->err, sizeof p->err, "ember: the run needs an arena of %zu bytes", p->arena_bytes);
    return EMBER_EINVAL;
  }
  for (int i = 0; i < p->nvalues; i++) {
    const PValue *v = &p->values[i];
    if (v->storage == ST_ARENA && !p->nsyms) ptrs[i] = (char *)arena + v->arena_off;  /* symbolic: run_sized */
    if (v->storage == ST_INTO) ptrs[i] = ptrs[v->into];  /* same layout as the input */
  }
  /* the waiting check: a kernel that checks indices ran since the record was last read */
  int waiting = p->target == EMBER_CUDA && p->index_checks && p->index_dev && !p->index_host, pending = 0;
  for (int s = 0; s < p->nsteps; s++) {
    const Step *st = &p->steps[s];
    if (st->kind == EMBER_STEP_KERNEL) {
      const PKernel *k = &p->kernels[st->index];
      if (p->target == EMBER_CUDA) {
        int rc = k->lib ? run_matmul(p, k, ptrs, arena, stream) : launch(p, st->index, ptrs, stream);
        if (rc) return rc;
        pending |= k->index_checks;
      } else {
        if (k->lib) {
          int rc = run_matmul_cpu(p, k, ptrs);
          if (rc) return rc;
          continue;
        }
        p->fns[st->index]((void *const *)ptrs);
        if (p->zero_div && __atomic_load_n(p->zero_div, __ATOMIC_RELAXED)) {
          __atomic_store_n(p->zero_div, 0, __ATOMIC_RELAXED);
          snprintf(p->err, sizeof p->err,
                   "ZeroDivisionError: integer division by zero in kernel ember_k%d (computing %s)",
                   st->index, k->what);
          return EMBER_ERUN;
        }
        if (p->index_err && __atomic_load_n(&p->index_err[0], __ATOMIC_RELAXED)) {
          int64_t code = p->index_err[0], i = p->index_err[1];
          __atomic_store_n(&p->index_err[0], 0, __ATOMIC_RELAXED);
          __atomic_store_n(&p->index_err[1], 0, __ATOMIC_RELAXED);
          return index_error(p, st->index, code, i);
        }
      }
    } else {
      if (!fb) return program_error(p, st->index, "a fallback step has no client to run it");
      if (waiting && pending) {  /* this run's record, read before another run can go on */
        int rc = check_waiting(p, stream);
        if (rc) return rc;
        pending = 0;
      }
      int rc = fb(ctx, st->index, ptrs);
      if (rc) {
        /* a record of an earlier kernel would be blamed on the next run */
        if (p->target == EMBER_CUDA && p->index_checks && p->index_dev)
          cuda_memset_async(p->index_dev, 0, 2 * sizeof(int64_t), stream, NULL, 0);
        return EMBER_ERUN;
      }
    }
  }
  return waiting && pending ? check_waiting(p, stream) : EMBER_OK;
}

int ember_program_run(ember_program *ep, void **ptrs, void *arena, void *stream, ember_fallback_fn fb, void *ctx) {
  if (ep->p.nsyms) {
    snprintf(ep->p.err, sizeof ep->p.err, "ember: this program has symbolic sizes: run it with ember_program_run_sized");
    return EMBER_EINVAL;
  }
  return run_program(&ep->p, ptrs, arena, stream, fb, ctx);
}

int ember_program_run_sized(ember_program *ep, const int64_t *syms, void **ptrs, void *arena, void *stream,
                            ember_fallback_fn fb, void *ctx) {
  Program *p = &ep->p;
  if (p->nsyms) {
    if (!syms) {
      snprintf(p->err, sizeof p->err, "ember: this program's run needs its %d size variables", p->nsyms);
      return EMBER_EINVAL;
    }
    ptrs[p->nvalues] = (void *)syms;  /* where its kernels read them (codegen_c.c) */
    size_t bytes;
    if (program_sym_arena(p, syms, ptrs, arena, &bytes)) {
      snprintf(p->err, sizeof p->err, "ember: out of memory planning the arena");
      return EMBER_ENOMEM;
    }
    if (bytes && !arena) {
      snprintf(p->err, sizeof p->err, "ember: the run needs an arena of %zu bytes at these sizes", bytes);
      return EMBER_EINVAL;
    }
  }
  return run_program(p, ptrs, arena, stream, fb, ctx);
}

int ember_program_check(ember_program *ep, void *stream) { return run_check_index(&ep->p, stream); }
