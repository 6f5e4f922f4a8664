/*
 * codegen_cuda.c - the CUDA target: a kernel is an `extern "C" __global__`
 * function taking the pointers of the values it reads and writes, compiled by
 * NVRTC (cuda.c) with src/prelude_cuda.h in front.
 *
 * Thread mapping: a pointwise kernel gives each thread elements of the
 * flattened space (a grid-stride loop, consecutive threads on consecutive
 * elements, so loads coalesce); a kernel with reduced dims gives each block
 * one row (outer point) at a time, its threads striding over the row in each
 * stage, partial results combined across the block (warp shuffles, then
 * shared memory) and broadcast, so every thread can use the row's result in
 * the next stage.  Row results are stored by thread 0.  Rows of at most
 * GROUP_ROW elements go to row groups instead: 4 to 32 lanes of a warp per
 * row, several rows per block, combined by shuffles among the group's lanes
 * (lane 0 of the group stores).  Columns and very short rows have schedules
 * of their own (a thread column, a thread per row).  The expressions are
 * the shared walker's (codegen.c), as on the CPU; this file keeps its own
 * state (CudaCg) and answers the walker's hooks (loads from vector
 * registers and the row cache, guarded and vector stores, block combines).
 *
 * A kernel with 16-byte vector paths is generated twice (cuda_kernel): with
 * the scalar fallback of each, which becomes its unaligned variant, and with
 * the vector paths alone, the kernel whose launch checks the pointers.
 *
 * A kernel with symbolic sizes (sym_schedule) is generated once for every
 * size; where the static schedule depends on a size, the choice is made at
 * the call: the block of rows of symbolic length and the grid are size
 * expressions the launch evaluates, the row kept in registers or read again
 * is a body of the kernel's own that the launch chooses (each body an
 * entry point with its own __launch_bounds__), and vector paths that need
 * 4 to divide a size run where the launch finds it does (else the
 * unaligned variant).
 */
#include <stdlib.h>
#include <string.h>

#include "ember_int.h"
#include "prelude_cuda_gen.h"  /* em_prelude_cuda: the text of src/prelude_cuda.h (with src/prelude.h) */

#define PW_BLOCK 256
#define PW_UNROLL 4        /* elements in flight per thread in pointwise kernels */
#define MAX_GRID (1u << 20)
#define TILE 32            /* tiled pointwise kernels: a tile's side (pw_tile) ... */
#define TILE_Y 8           /* ... its block TILE x TILE_Y threads ... */
#define TILE_MIN 16        /* ... where both tiled loops are at least this long */
#define SHORT_ROW 16       /* short rows: at most this many elements ... */
#define SHORT_MIN_POINTS 8192 /* ... and at least this many rows (short_rows) */
#define SHORT_X 128        /* short rows: threads (rows) per block */
#define COL_Y 32           /* column schedule: most threads per column (col_threads) */
#define COL_UNROLL 4       /* column schedule: loads of a column unrolled */
#define COL_MIN_X 16       /* column schedule: fewest columns per block (col_x) */
#define COL_FEW_BLOCKS (FEW_BLOCKS * 7 / 8) /* ... where 32 would leave fewer blocks (col_x) */
#define COL_CACHE 16384    /* column schedule: a block keeps its columns in registers where they
                              hold at most this many elements (16 a thread in a block of 1024, 32
                              in one of 512) */
#define ROW_PER 8          /* rows: elements per thread (row_block) ... */
#define ROW_MAXB 1024      /* ... in blocks of at most this many threads */
#define ROWCACHE_MAX 8     /* rows of up to this many elements per thread stay in registers */
#define ROWCACHE_LEN 2048  /* ... if the row has at most this many */
#define REREAD_ROOTS 1     /* ... or it is read from more tensors than this */
#define GROUP_ROW (32 * ROWCACHE_MAX) /* row groups: rows of at most this many elements (a warp's lanes
                                         hold ROWCACHE_MAX each in registers) ... */
#define GROUP_MIN 4        /* ... get at least this many lanes each (group_lanes) ... */
#define GROUP_THREADS 256  /* ... in blocks of this many threads, several rows per block */
#define MAX_VDIV 4         /* symbolic vector paths: at most this many sizes that 4 must divide */
#define FEW_BLOCKS 264     /* a grid of fewer blocks (2 per SM of a 132-SM GPU) gets smaller ones:
                              fewer rows per row group block (group_rows), columns (col_x) */
#define WALK_ROWS 4        /* pointwise lanes: a thread walks this many steps of an outer loop
                              (pw_walk) ... */
#define WALK_MIN_OPS 8     /* ... where a step after the first computes at least this many fewer ops
                              (the 4 lanes' together) ... */
#define WALK_MIN_BLOCKS (2 * FEW_BLOCKS) /* ... and at least this many blocks are left */

static const char *cuda_prelude_text(void) { return em_prelude_cuda; }

/* One body of a kernel of several (sym_entry): an entry point of its own. */
typedef struct Body {
  unsigned threads;        /* its __launch_bounds__: the most threads a block ... */
  int blocks;              /* ... and the blocks an SM it is bounded for, 0: not said */
  int64_t over;            /* the launch runs it where the row (column) is longer than this; -1: the first */
  const char *what;        /* in words, for its comment */
} Body;

/* The CUDA target's state (Cg.ts): what the thread mapping and the vector
   paths add to the shared walker's, for the kernel being generated. */
typedef struct CudaCg {
  const char *itype;       /* the C type of loop indices: "int64_t", or "int" where every index fits */
  int wide;                /* a symbolic graph's kernel with 64-bit indices (its wide variant; the kernel
                              itself where it must be: cuda_kernel), not 32-bit */
  const char *store_guard; /* a condition around stores of row results ("threadIdx.x == 0"), or NULL */
  const char *combine;     /* the prelude's helpers that combine a block's partial reductions at
                              finish ("em_block_" rows, "em_col_" columns), or NULL */
  int rowcache;            /* rows, columns: >0 = elements (vector rows: groups of 4) per thread; loads are
                              kept in registers C<n>[u] (C<n>[u][lane]) across the stages of a row */
  int rowvec;              /* rows, columns: each thread takes groups of 4 consecutive elements
                              (lanes) along the reduced dim */
  int colvec;              /* columns, point lanes: the vector stores are guarded by `live` */
  int ptlanes;             /* short rows: each thread takes 4 consecutive output points (lanes along
                              the innermost outer loop), an accumulator each (point_lanes) */
  int pacc;                /* point lanes: the number of the stage's first accumulator, 4 a reduction
                              (lane u of its j-th reduction is a<pacc + 4j + u>) */
  int chains;              /* point lanes: a cat's branches met in them (cuda_cat_lanes) */
  int group;               /* rows: lanes per row in row groups (4, 8, 16 or 32; a lane's place in its
                              row is `gl`), 0 where a block takes a row */
  int nvec;                /* vector accesses made in this kernel so far */
  int nvload;              /* ... of them loads (point lanes take none without one) */
  int nrcnames;            /* row cache arrays declared in this kernel (their names) */
  int in_row;              /* inside a stage's loop over the row (where u is defined) */
  Cse *rc; int nrc, caprc; /* the row cache: load key -> register array */
  int rcmark;              /* the row cache's entries before this one were filled in earlier stages */
  int rolled;              /* rows: a rarely run path (the unaligned fallback of vector rows): loops
                              not unrolled, no row cache, so NVRTC compiles less */
  /* Pointwise lanes: each thread takes 4 consecutive elements; reads and
     writes with unit stride along the loop become one 16-byte (for 4-byte
     types) access per thread, issued before (loads) and after (stores) the
     four lanes' code. */
  int vec;                 /* lanes are being emitted */
  int vlane;               /* the lane being emitted (0..3) */
  int vvar;                /* the loop var the lanes step along */
  const char *walked;      /* pw_lanes: the walk in words (", 4 steps of i0 a thread"), or "" */
  int wrows;               /* pointwise lanes that walk an outer loop (pw_walk): its steps per thread,
                              0 where they do not ... */
  int wvar, wrow;          /* ... the walked loop's var, and the step being emitted */
  Expr *sub0[MAXD];        /* the index substitutions of lane 0 */
  Str *vpre, *vpost;       /* vector loads and register declarations; vector stores */
  Str *valign;             /* the alignment condition of every vector access */
  AlignCheck *vchk; int nvchk, capvchk;  /* the same, for the launch to check */
  int aligned_only;        /* generate the vector path alone, for a launch that checks the pointers
                              (the kernel's aligned variant), not "if (aligned) {vector} else {scalar}" */
  int no_vec;              /* generate the scalar paths alone (a symbolic kernel's unaligned variant
                              where sizes choose it: pw_lanes and row_vec take nothing) */
  int has_alt;             /* this generation emitted a vector path and its scalar fallback */
  Cse *vk; int nvk, capvk; /* vector access key -> register name */
  Str *decls;              /* declarations put before the kernel body (the row cache's arrays) */
  const char *oext, *iext; /* the outer points and the elements of a row as C: constants, or size
                              expressions in a symbolic kernel */
  int dynblock;            /* symbolic rows: the block's size is the launch's (Kernel.sblock), the
                              threads of a row stride by blockDim.x */
  Expr *vdiv[MAX_VDIV]; int nvdiv; /* symbolic kernels: the size expressions its vector paths take 4
                              to divide (vec_div4), checked in the kernel and by the launch (svec) */
  int ndivuse;             /* vec_div4's answers that take a symbolic size, so far */
  /* Tiled pointwise kernels (pw_tile): the value read through the shared tile and its address, as
     printed where the tile is read back; the loads it answered */
  int tile_v; const char *tile_a; int tile_hits;
  int kstages;             /* the kernel's stages (row_stages), rows and columns; 0 pointwise */
  /* A kernel of several bodies (symbolic rows and columns of symbolic length: sym_entry) */
  Str *ebody, *edecls;     /* per body its text and declarations (cuda_body's caller's, MAX_BODIES each) */
  int nbodies;             /* the bodies begun; 0: the kernel is one body */
  Body body[MAX_BODIES];   /* ... what each is */
} CudaCg;

static CudaCg *cs(const Cg *c) { return c->ts; }

static void *cuda_state_new(Cg *c) { return calloc(1, sizeof(CudaCg)); }

static void cuda_state_free(void *ts) {
  CudaCg *cu = ts;
  if (!cu) return;
  free(cu->vchk);
  free(cu->rc);
  free(cu->vk);
  free(cu);
}

/* ---- the walker's hooks ---- */

/* A vector path that needs 4 to divide the size expression e: a constant
   answers at once; in a symbolic kernel the path takes it, and runs where
   the call's e is a multiple of 4: the condition joins the alignment test
   of the path (valign) and the kernel's list for the launch (vdiv, which
   becomes Kernel.svec).  Returns 0 where the path cannot take it. */
static int vec_div4(Cg *c, Expr *e) {
  CudaCg *cu = cs(c);
  if (e->kind == E_CONST) return e->c % 4 == 0;
  if (!c->k->symbolic || !cu->valign || !ex_is_size(e)) return 0;
  Expr *m = ex_mod(&c->x, e, 4);
  if (m->kind == E_CONST) return m->c == 0;
  int i = 0;
  while (i < cu->nvdiv && !ex_equal(cu->vdiv[i], e)) i++;
  if (i == cu->nvdiv) {
    if (i == MAX_VDIV) return 0;
    cu->vdiv[cu->nvdiv++] = e;
  }
  const char *cond = cg_fmt(c, " && (%s) %% 4 == 0", cg_size(c, e));
  if (!cu->valign->s || !strstr(cu->valign->s, cond)) str_puts(cu->valign, cond);
  cu->ndivuse++;
  return 1;
}

/* Does e hold a min or a max (the clamp of a cat's or a pad's input index)? */
static int has_clamp(const Expr *e) {
  if (e->kind == E_MIN || e->kind == E_MAX) return 1;
  if (e->kind == E_CONST || e->kind == E_VAR || e->kind == E_SYM) return 0;
  return has_clamp(e->a) || (e->b && has_clamp(e->b));
}

/* Lanes: is value v at addr (lane-relative) read or written with unit
   stride along the lanes, at lane 0's index + a constant?  Then lane 0's
   address is returned (and *align0, the constant offset that says the
   pointer's alignment); else NULL. */
static const char *vec_a0(Cg *c, const Value *v, Expr *addr, int64_t *align0) {
  CudaCg *cu = cs(c);
  int es = dtype_size(v->dtype);
  if (es > 4) return NULL;
  Expr *e = addr;
  for (int d = 0; d < MAXD; d++)
    if (cu->sub0[d]) e = ex_subst(&c->x, e, d, cu->sub0[d]);
  /* e - vvar: free of vvar (a unit stride along the lanes) and every other
     var's coefficient a multiple of 4 (the lanes' start is one), so e is lane
     0's constant offset modulo 4 */
  Expr *diff = ex_add(&c->x, e, ex_mul(&c->x, ex_var(&c->x, cu->vvar), -1));
  /* or: free of vvar, of the loop vars alone (no gathered index, loaded in
     the lanes' body), and every term but the constant a multiple of 4, whatever
     its division or modulo (a rolled or windowed row: 384*((i2 + 4) % 7)); not
     a clamp: a cat's or pad's input is read in its branch, and a vector load
     would be made before the branches, every input's.  But in point lanes,
     which take no kernel with a cat's branches (point_lanes), a clamp is a
     pad's, whose input is read at its clamped index in every case: a max
     pool's window over the -inf border (a valid address, the clamp the same
     in every lane, since diff is free of vvar) */
  Expr *zero = diff;  /* at every loop var 0: a constant where no gathered index is in it */
  for (int var = 0; var < c->x.nvars; var++) zero = ex_subst(&c->x, zero, var, ex_const(&c->x, 0));
  if (zero->kind != E_CONST) return NULL;
  int64_t k;
  if ((cu->ptlanes || !has_clamp(diff)) && !ex_uses_var(diff, cu->vvar) && ex_terms_multiple(diff, 4, &k)) {
    *align0 = k;
    return cg_size(c, e);
  }
  Expr *sym[MAXD];  /* a symbolic kernel's coefficients that are size expressions (a row's length) */
  int nsym = 0;
  for (int var = 0; var < c->x.nvars; var++) {
    Expr *step = ex_add(&c->x, ex_subst(&c->x, diff, var, ex_add(&c->x, ex_var(&c->x, var), ex_const(&c->x, 1))),
                        ex_mul(&c->x, diff, -1));
    if (step->kind != E_CONST && c->k->symbolic && var != cu->vvar && nsym < MAXD && ex_is_size(step))
      sym[nsym++] = step;
    else if (step->kind != E_CONST || step->c % 4 || (var == cu->vvar && step->c)) return NULL;
  }
  for (int i = 0; i < nsym; i++)  /* ... multiples of 4 where the call's sizes make them so */
    if (!vec_div4(c, sym[i])) return NULL;
  *align0 = zero->c;
  return cg_size(c, e);
}

/* The vector register for v at lane 0's address a0 (from vec_a0, with its
   alignment offset zc), made with its declaration in vpre and its alignment
   condition at first use; NULL if a0 is NULL (the access is no vector's). */
static const char *vec_reg(Cg *c, const Value *v, const char *a0, int64_t zc, int store) {
  CudaCg *cu = cs(c);
  if (!a0) return NULL;
  int es = dtype_size(v->dtype);
  const char *key = cg_fmt(c, "%c%d@%s", store ? 'S' : 'V', v->id, a0);
  for (int i = 0; i < cu->nvk; i++)
    if (!strcmp(cu->vk[i].key, key)) return cu->vk[i].name;
  Cse *vk = cg_room(c, cu->vk, cu->nvk, &cu->capvk, 16, sizeof *cu->vk);
  if (!vk) return NULL;
  cu->vk = vk;
  /* point lanes' stores of a stage and the outer items after it are regions of one scope:
     numbered on from the regions before (nvec) */
  const char *name = cg_fmt(c, "%c%d", store ? 'S' : 'V', (cu->ptlanes ? cu->nvec : 0) + cu->nvk);
  cu->vk[cu->nvk].key = key, cu->vk[cu->nvk].name = name, cu->nvk++;
  const char *ct = cg_storage_ctype(v->dtype);
  if (store) {
    str_printf(cu->vpre, "%*sem_vec4<%s> %s;\n", 2 * c->indent, "", ct, name);
    str_printf(cu->vpost, "%*s%s*(em_vec4<%s> *)&%s[%s] = %s;\n", 2 * c->indent, "",
               cu->colvec ? "if (live) " : "", ct, cg_param(c, v->id), a0, name);
  } else {
    str_printf(cu->vpre, "%*sconst em_vec4<%s> %s = *(const em_vec4<%s> *)&%s[%s];\n", 2 * c->indent, "",
               ct, name, ct, cg_param(c, v->id), a0);
    cu->nvload++;
  }
  const char *cond = cg_fmt(c, " && (uintptr_t)(%s + (%lld)) %% %d == 0", cg_param(c, v->id), (long long)zc, 4 * es);
  if (!cu->valign->s || !strstr(cu->valign->s, cond)) {  /* once per pointer */
    str_puts(cu->valign, cond);
    AlignCheck *chk = cg_room(c, cu->vchk, cu->nvchk, &cu->capvchk, 16, sizeof *cu->vchk);
    if (!chk) return name;
    cu->vchk = chk;
    cu->vchk[cu->nvchk++] = (AlignCheck){v->id, 4 * es, zc * es};
  }
  return name;
}

/* Rows: keep t, the element of this thread's share of the row under rkey,
   in the row cache's register array (slot [u], or [u][lane] in vector rows,
   where the 4 lanes share one array), for the stages that follow. */
static void rc_fill(Cg *c, const char *rkey, int dt, const char *t) {
  CudaCg *cu = cs(c);
  const char *slot = cu->vec ? cg_fmt(c, "[u][%d]", cu->vlane) : "[u]";
  for (int i = cu->rcmark; i < cu->nrc; i++)
    if (!strcmp(cu->rc[i].key, rkey)) {  /* lane 0 made it in this stage */
      cg_line(c, "%s%s = %s;", cu->rc[i].name, slot, t);
      return;
    }
  Cse *rc = cg_room(c, cu->rc, cu->nrc, &cu->caprc, 16, sizeof *cu->rc);
  if (!rc) return;
  cu->rc = rc;
  const char *name = cg_fmt(c, "C%d", cu->nrcnames++);
  cu->rc[cu->nrc].key = rkey, cu->rc[cu->nrc].name = name, cu->nrc++;
  str_printf(cu->decls, cu->vec ? "  %s %s[%d][4];\n" : "  %s %s[%d];\n", cg_compute_ctype(dt), name, cu->rowcache);
  cg_line(c, "%s%s = %s;", name, slot, t);
}

/* ... and the register holding rkey's element, filled in an earlier stage, or NULL. */
static const char *rc_find(Cg *c, const char *rkey) {
  CudaCg *cu = cs(c);
  for (int i = 0; i < cu->rcmark; i++)
    if (!strcmp(cu->rc[i].key, rkey)) return cu->vec ? cg_fmt(c, "%s[u][%d]", cu->rc[i].name, cu->vlane)
                                                     : cg_fmt(c, "%s[u]", cu->rc[i].name);
  return NULL;
}

/* Rows: a computed value a stage's reductions read (a LayerNorm's input:
   gMLP's GELU(x + b) of a GEMM's result) kept in the row cache beside the
   loads, in a kernel of several stages, so that a later stage reading it
   again (the variance's x - mean) takes it from a register instead of
   computing it again from the cached loads: gmlp_s16's gate LayerNorm
   computed each GELU twice. */
static int row_input(const Cg *c, const Value *v) {
  const Kernel *k = c->k;
  for (int i = 0; i < k->nitems; i++)
    if (k->items[i].kind == IT_REDUCE && c->g->values[k->items[i].v]->def->red_in == v->id) return 1;
  return 0;
}

static const char *cuda_def_find(Cg *c, const Value *v, const char *key) {
  CudaCg *cu = cs(c);
  if (!cu->rowcache || !cu->in_row || !row_input(c, v)) return NULL;
  return rc_find(c, cg_fmt(c, "D%s", key));
}

static void cuda_def_keep(Cg *c, const Value *v, const char *key, const char *t) {
  CudaCg *cu = cs(c);
  if (!cu->rowcache || !cu->in_row || cu->kstages < 2 || !row_input(c, v)) return;
  rc_fill(c, cg_fmt(c, "D%s", key), v->dtype, t);
}

/* A load: from the row cache where a later stage reads the row again (one
   register per element of the thread's share of the row; in vector rows
   one per group of 4 and lane), from a vector register in lanes, else
   plain. */
static const char *cg_cuda_load(Cg *c, const Value *r, Expr *addr, const char *a) {
  CudaCg *cu = cs(c);
  if (cu->tile_a && r->id == cu->tile_v && !strcmp(a, cu->tile_a)) {  /* a tiled kernel's transposed read */
    cu->tile_hits++;
    return cg_temp(c, r->dtype, "em_tile[threadIdx.x][j]", NULL);
  }
  const char *key = cg_fmt(c, "L%d@%s", r->id, a);
  int cached = cu->rowcache && cu->in_row && r->kernel != c->k->id;
  int64_t zc = 0;
  const char *va0 = cu->vec ? vec_a0(c, r, addr, &zc) : NULL;  /* lane 0's address of a vector load */
  /* vector rows: the 4 lanes of a vector load share one array */
  const char *rkey = cached && va0 ? cg_fmt(c, "L%d@%s#vec", r->id, va0) : key;
  const char *reg = cached ? rc_find(c, rkey) : NULL;  /* filled in an earlier stage */
  if (reg) return cg_temp(c, r->dtype, reg, NULL);
  const char *vr = vec_reg(c, r, va0, zc, 0), *t;
  if (vr) t = cg_temp(c, r->dtype, cg_load_conv(c, cg_fmt(c, "%s.v[%d]", vr, cu->vlane), r->dtype), NULL);
  else t = cg_temp(c, r->dtype, cg_load_conv(c, cg_fmt(c, "%s[%s]", cg_param(c, r->id), a), r->dtype), NULL);
  if (cached) rc_fill(c, rkey, r->dtype, t);
  return t;
}

/* A store: into a lane of a vector register, or under the store guard (row results). */
static int cg_cuda_store(Cg *c, const Value *v, Expr *addr, const char *a, const char *x) {
  CudaCg *cu = cs(c);
  int64_t zc = 0;
  const char *a0 = cu->vec && (!cu->store_guard || cu->colvec) ? vec_a0(c, v, addr, &zc) : NULL;
  const char *vr = vec_reg(c, v, a0, zc, 1);
  if (vr) cg_line(c, "%s.v[%d] = %s;", vr, cu->vlane, cg_store_conv(c, x, v->dtype));
  else if (cu->store_guard)
    cg_line(c, "if (%s) %s[%s] = %s;", cu->store_guard, cg_param(c, v->id), a, cg_store_conv(c, x, v->dtype));
  else return 0;
  return 1;
}

/* Combine the block's (or column's) partial accumulators (the prelude's
   helpers broadcast the result), where a stage ends. */
static void cuda_red_combine(Cg *c, const Value *v, int ad) {
  const Node *n = v->def;
  int id = cg_acc(c, v->id);
  const char *h = cs(c)->combine;
  if (!h) return;
  int shfl = strcmp(h, "em_col_") != 0;  /* a block's or a row group's shuffles (em_rmax's NaN rule) */
  switch (n->red) {
  case R_SUM: case R_MEAN: cg_line(c, "a%d = %ssum(a%d);", id, h, id); break;
  case R_PROD: cg_line(c, "a%d = %sprod(a%d);", id, h, id); break;
  case R_ANY: cg_line(c, "a%d = %sor(a%d);", id, h, id); break;
  case R_ALL: cg_line(c, "a%d = %sand(a%d);", id, h, id); break;
  case R_MAX: case R_MIN:
    if (dtype_is_float(ad) && shfl) {
      /* the block's (group's) max / min propagates NaN (em_rmax): fold this thread's
         NaN into its partial instead of a second block reduction of the flags */
      cg_line(c, "a%d = n%d ? (%s)NAN : a%d;", id, id, cg_compute_ctype(ad), id);
      cg_line(c, "a%d = %s%s(a%d);", id, h, n->red == R_MAX ? "max" : "min", id);
      break;
    }
    cg_line(c, "a%d = %s%s(a%d);", id, h, n->red == R_MAX ? "max" : "min", id);
    if (dtype_is_float(ad)) cg_line(c, "n%d = %sor(n%d);", id, h, id);
    break;
  case R_ARGMAX: cg_line(c, "%sargmax(a%d, j%d);", h, id, id); break;
  case R_ARGMIN: cg_line(c, "%sargmin(a%d, j%d);", h, id, id); break;
  }
}

/* The lane being emitted, or -1 where the element at idx is the same in
   every lane (its index, the lane's substitutions applied, does not use
   the lanes' var: a 0-dim operand, a per-row one in vector rows), so that
   lane 0's value of it serves all four.  Not in a body keeping its row in
   registers, where each lane keeps its own (rc_fill). */
static int cuda_lane(Cg *c, Expr **idx, int n) {
  CudaCg *cu = cs(c);
  if (!cu->vec) return -1;
  if (cu->rowcache) return cu->vlane;
  int lanes = 0, steps = 0;
  for (int d = 0; d < n; d++) {
    Expr *e = cg_subst(c, idx[d]);
    lanes |= ex_uses_var(e, cu->vvar);
    steps |= cu->wrows && ex_uses_var(e, cu->wvar);
  }
  /* in a walk (pw_walk), a step's elements are others where the index moves along it */
  if (!lanes && !steps) return -1;
  return (lanes ? cu->vlane : 0) + (steps ? 4 * (cu->wrow + 1) : 0);
}

/* Lane 0 may compute the 4 lanes' cat values at once where the cat dim's index does not move with the lanes. */
static int cuda_cat_lanes(Cg *c, Expr *at) {
  CudaCg *cu = cs(c);
  if (cu->vec) cu->chains++;
  return cu->vec && !cu->wrows && cu->vlane == 0 && !ex_uses_var(at, cu->vvar) ? 4 : 1;
}

/* The index substitutions of lane u (0..3) of sub0, the lane's element at
   the lanes' loop var + u. */
static void lane_subs(Cg *c, int u) {
  CudaCg *cu = cs(c);
  cu->vlane = u;
  Expr *shift = ex_add(&c->x, ex_var(&c->x, cu->vvar), ex_const(&c->x, u));
  for (int d = 0; d < MAXD; d++) {
    Expr *b = cu->sub0[d] ? cu->sub0[d] : d == cu->vvar ? ex_var(&c->x, d) : NULL;
    c->sub[d] = b && u ? ex_subst(&c->x, b, cu->vvar, shift) : cu->sub0[d];
  }
}

/* ---- thread mapping ---- */

/* A loop's extent as an expression: its size expression, or its constant. */
static Expr *loop_ext(Cg *c, const Loop *l) { return l->sn ? l->sn : ex_const(&c->x, l->n); }

/* The product of the extents of n loops. */
static Expr *loops_ext(Cg *c, const Loop *l, int n) {
  Expr *e = ex_const(&c->x, 1);
  for (int i = 0; i < n; i++) e = ex_mul_e(&c->x, e, loop_ext(c, &l[i]));
  return e;
}

/* An extent as an operand of C's / and %: a constant, or the expression in parentheses. */
static const char *ext_operand(Cg *c, const Expr *e) {
  return e->kind == E_CONST ? cg_fmt(c, "%lld", (long long)e->c) : cg_fmt(c, "(%s)", cg_size(c, e));
}

/* decompose in a symbolic kernel: the extents and strides are size expressions. */
static void decompose_sym(Cg *c, const Loop *loops, int n, const char *lin) {
  const char *t = cs(c)->itype;
  Expr *stride = ex_const(&c->x, 1);
  for (int i = n - 1; i >= 0; i--) {
    const char *v = c->names[loops[i].var];
    Expr *len = loop_ext(c, &loops[i]);
    if (n == 1) cg_line(c, "const %s %s = %s;", t, v, lin);
    else if (i == n - 1) cg_line(c, "const %s %s = %s %% %s;", t, v, lin, ext_operand(c, len));
    else if (i == 0) cg_line(c, "const %s %s = %s / %s;", t, v, lin, ext_operand(c, stride));
    else cg_line(c, "const %s %s = (%s / %s) %% %s;", t, v, lin, ext_operand(c, stride), ext_operand(c, len));
    stride = ex_mul_e(&c->x, stride, len);
  }
}

/* Declare the loop vars of `loops` from a linear index `lin` over them. */
static void decompose(Cg *c, const Loop *loops, int n, const char *lin) {
  CudaCg *cu = cs(c);
  int64_t stride = 1;
  const char *t = cu->itype;
  if (c->k->symbolic) {
    decompose_sym(c, loops, n, lin);
    return;
  }
  for (int i = n - 1; i >= 0; i--) {
    const char *v = c->names[loops[i].var];
    if (n == 1) cg_line(c, "const %s %s = %s;", t, v, lin);
    else if (i == n - 1) cg_line(c, "const %s %s = %s %% %lld;", t, v, lin, (long long)loops[i].n);
    else if (i == 0) cg_line(c, "const %s %s = %s / %lld;", t, v, lin, (long long)stride);
    else cg_line(c, "const %s %s = (%s / %lld) %% %lld;", t, v, lin, (long long)stride, (long long)loops[i].n);
    stride *= loops[i].n;
  }
}

/* Threads per row: about ROW_PER (8) elements each (kept in registers across
   a row's stages), from 64 to ROW_MAXB (1024): fewer threads with 8
   elements each beat more with 4 on layer norms over 1024, and 16 each
   was slower again. */
static unsigned row_block(int64_t n) {
  int64_t b = 64;
  while (b < ROW_MAXB && b * ROW_PER < n) b *= 2;
  return (unsigned)b;
}

/* A static row's threads: the fewest warps (at least 2) that leave each
   thread at most ROW_PER elements, where row_block's power of two would
   leave the last pass over the row part idle (a row of 768: 96 threads of
   8 elements, where 128 threads took two passes of 512, the second half
   empty). */
static unsigned row_threads(int64_t n) {
  int64_t b = 64;
  while (b < ROW_MAXB && b * ROW_PER < n) b += 32;
  return (unsigned)b;
}

/* Threads down each column: enough blocks x threads to fill the GPU (about
   2^20 threads; COL_Y = 32 when the output is short), at least 8, so that
   many columns with a short reduced dim do not pay a 32-way combine for 2
   elements each (a sum over dim 0 of 64 rows ran faster with 8 than 32);
   a short output keeps 32, where 8 would leave the GPU mostly idle. */
static unsigned col_threads(int64_t oext) {
  int64_t by = 8;
  while (by < COL_Y && oext * by < ((int64_t)1 << 20)) by *= 2;
  return (unsigned)by;
}

/* Columns per block: CUDA_COL_X (32), or COL_MIN_X (16) where 32 would
   leave the grid fewer than COL_FEW_BLOCKS blocks (7/8 of two per SM of
   132 SMs): the same threads in twice as many blocks of half the size, so
   that many SMs are not left with one block of 1024 threads while others
   have two (a LayerNorm over the channels of [B*C, T] data had 196
   blocks), and 16 columns of a 16-bit value are still a 32-byte sector per
   warp access.  Where nearly every SM has two (a sum over dim 0 of 8192
   columns: 256 blocks), 32 columns read whole 128-byte lines. */
static unsigned col_x(int64_t oext) {
  return (oext + CUDA_COL_X - 1) / CUDA_COL_X < COL_FEW_BLOCKS ? COL_MIN_X : CUDA_COL_X;
}

/* Short rows: rows of at most SHORT_ROW elements (a pooling window: 9 for
   a 3x3 max pool, 4 for a 2x2 average), enough of them to fill the GPU,
   each summed by one thread in a loop, SHORT_X threads (output points) per
   block, instead of a block of at least 64 threads per row (most of them
   idle) or a column of 8 threads.  ResNet-50's and DenseNet-121's pooling
   then runs as ember's kernels, the BatchNorm and ReLU before it inlined
   into its loads, where torch's kernel ran. */
static int short_rows(int64_t iext, int64_t oext) {
  return iext > 1 && iext <= SHORT_ROW && oext >= SHORT_MIN_POINTS;
}

/* A symbolic kernel's rows of a constant length of at most SHORT_ROW (a
   max pool's 3x3 windows over a symbolic batch and image): a thread per row
   at every count.  Row groups of 4 lanes read a window's elements from
   places a channel apart each (NHWC), uncoalesced; with few rows either is
   small. */
static int sym_short_rows(const Loop *inner, int ni) {
  int64_t n = 1;
  for (int i = 0; i < ni; i++) {
    if (inner[i].sn) return 0;
    n *= inner[i].n;
  }
  return n > 1 && n <= SHORT_ROW;
}

/* Row groups: a row of at most GROUP_ROW elements (a LayerNorm over 96
   channels, a softmax over a window of 49) would leave most of a block of
   64+ threads idle, and pay a block-wide combine through shared memory.
   It gets instead the fewest lanes of one warp, 4, 8, 16 or 32, that leave
   at most ROW_PER (8) elements to each (kept in registers across the row's
   stages, as in a block per row); the rows of a block run side by side, each
   group's partials combined by shuffles among its own lanes.  A row of 17
   to 32 (a cosine attention's norm over 32) gets 4 lanes, 8 elements each:
   twice the bytes in flight per warp of 8 lanes with 4 each (8 rows a warp
   instead of 4). */
static unsigned group_lanes(int64_t n) {
  unsigned w = GROUP_MIN;
  while (w < 32 && (int64_t)w * ROW_PER < n) w *= 2;
  return w;
}

/* Rows per block: GROUP_THREADS threads' worth, fewer (down to one warp)
   while that leaves the grid fewer than FEW_BLOCKS blocks, so that a
   few hundred rows still spread over the SMs. */
static unsigned group_rows(unsigned w, int64_t oext) {
  unsigned rows = GROUP_THREADS / w;
  while (rows * w > 32 && (oext + rows - 1) / rows < FEW_BLOCKS) rows /= 2;
  return rows;
}

/* Where a thread works in its row, and how many threads share the row: a
   row group's lane, or the block's thread. */
static const char *row_lane(const Cg *c) { return cs(c)->group ? "gl" : "threadIdx.x"; }
static unsigned row_span(const Cg *c) { return cs(c)->group ? (unsigned)cs(c)->group : c->k->block[0]; }

/* The guard of a row result's store: one thread of the row (of the column's
   live point) stores it. */
static const char *row_guard(const Cg *c, int cols) {
  return cols ? "live && threadIdx.y == 0" : cs(c)->group ? "gl == 0" : "threadIdx.x == 0";
}

/* Do all indices of this kernel fit in 32 bits?  (int arithmetic is much
   cheaper than int64 on the GPU.) */
static int small_indices(Cg *c, int64_t oext, int64_t iext) {
  const int64_t lim = ((int64_t)1 << 31) - ((int64_t)1 << 29);
  if (oext * (iext ? iext : 1) >= lim) return 0;
  for (int v = 0; v < c->g->nvalues; v++) {
    const Value *x = c->g->values[v];
    if (x->materialized && value_span(x) >= lim) return 0;
  }
  return 1;
}

/* Column schedule?  When the first reduction's input is contiguous along the
   innermost outer loop and not along the innermost reduced one, a block per
   row would read with a stride: give each thread a column instead.  Along
   the outer loop, a read that does not move with it (a per-channel weight
   of a LayerNorm over NCHW data read by channel) is the same for a column's
   neighbours and does not count (bcast: its address of the reduced vars
   alone, no gathered index in it); along the row every read counts. */
typedef struct Contig { Cg *c; const Kernel *k; int var; int unit; int any; int bcast; } Contig;
static void contig_read(void *ud, int r, Expr *addr) {
  Contig *t = ud;
  Cg *c = t->c;
  Expr *next = ex_subst(&c->x, addr, t->var, ex_add(&c->x, ex_var(&c->x, t->var), ex_const(&c->x, 1)));
  Expr *d = ex_add(&c->x, next, ex_mul(&c->x, addr, -1));
  if (t->bcast && d->kind == E_CONST && d->c == 0) {  /* of the reduced vars alone (no gathered index): the same */
    Expr *rest = addr;
    for (int v = 0; v < t->k->ndim; v++)
      if (t->k->rmask >> v & 1) rest = ex_subst(&c->x, rest, v, ex_const(&c->x, 0));
    if (ex_is_size(rest)) return;
  }
  t->any = 1;
  if (d->kind != E_CONST || d->c != 1) t->unit = 0;
}

static int column_schedule(Cg *c, Kernel *k) {
  int lo = -1, li = -1;  /* innermost outer and reduced dims of size > 1 */
  for (int d = 0; d < k->ndim; d++) {
    if (k->size[d] == 1) continue;
    if (k->rmask >> d & 1) li = d;
    else lo = d;
  }
  if (lo < 0 || li < 0) return 0;
  const Value *red = NULL;
  for (int i = 0; i < k->nitems && !red; i++)
    if (k->items[i].kind == IT_REDUCE) red = c->g->values[k->items[i].v];
  if (!red) return 0;
  Expr *idx[MAXD];
  for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(&c->x, d);
  Contig outer = {c, k, lo, 1, 0, 1}, inner = {c, k, li, 1, 0, 0};
  walk_reads(c->g, &c->x, red->def->red_in, idx, contig_read, &outer);
  walk_reads(c->g, &c->x, red->def->red_in, idx, contig_read, &inner);
  return outer.any && outer.unit && !inner.unit;
}

/* How many tensors do the kernel's reductions read along the row (at an
   address that moves with a reduced loop var)?  Counting stops past `most`. */
typedef struct RowRoots { const Kernel *k; int n, most; int root[8]; } RowRoots;
static void row_root(void *ud, int r, Expr *addr) {
  RowRoots *t = ud;
  if (t->n > t->most || !cg_along_row(t->k, addr)) return;
  for (int i = 0; i < t->n; i++)
    if (t->root[i] == r) return;
  t->root[t->n++] = r;
}

static int row_roots(Cg *c, Kernel *k, int most) {
  RowRoots t = {k, 0, most < 7 ? most : 7, {0}};
  Expr *idx[MAXD];
  for (int d = 0; d < k->ndim; d++) idx[d] = ex_var(&c->x, d);
  for (int i = 0; i < k->nitems && t.n <= t.most; i++)
    if (k->items[i].kind == IT_REDUCE) walk_reads(c->g, &c->x, c->g->values[k->items[i].v]->def->red_in, idx, row_root, &t);
  return t.n;
}

/* The items of one stage at the point its loop vars are declared: partial
   reductions updated, full-shape values stored. */
static void stage_items(Cg *c, const Item *items, int n) {
  for (int i = 0; i < n; i++) {
    const Value *v = c->g->values[items[i].v];
    if (items[i].kind == IT_REDUCE) cg_red_update(c, v);
    else {
      Expr *idx[MAXD];
      item_index(&c->x, c->k, v, IT_STORE, idx);
      cg_store(c, v, idx, cg_def(c, v, idx));
    }
  }
}

/* The results of a stage's reductions, combined and stored. */
static void stage_finish(Cg *c, const Item *items, int n) {
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) cg_red_finish(c, c->g->values[items[i].v]);
}

/* Outer items (of the outer loops alone, between a row's stages), computed and stored. */
static void outer_items(Cg *c, const Item *items, int n) {
  for (int i = 0; i < n; i++) {
    const Value *v = c->g->values[items[i].v];
    Expr *idx[MAXD];
    item_index(&c->x, c->k, v, IT_OUTER, idx);
    cg_store(c, v, idx, cg_def(c, v, idx));
  }
}

/* Point lanes: lane u's accumulators of the stage's reductions (items): a<pacc + 4j + u> for the j-th. */
static void point_accs(Cg *c, const Item *items, int n, int u) {
  int j = 0;
  for (int i = 0; i < n; i++)
    if (items[i].kind == IT_REDUCE) c->acc[items[i].v] = 1 + cs(c)->pacc + 4 * j++ + u;
}

/* The code of fn (stage_items, stage_finish, outer_items) over items for
   the 4 lanes (vvar: along the innermost reduced loop in vector rows, the
   innermost outer one in point lanes, each lane with its own accumulators
   there), the accesses with unit stride along the lanes as one vector load
   before and one vector store after (vec_reg), as in pointwise lanes
   (pw_lanes). */
static void in_lanes(Cg *c, void (*fn)(Cg *, const Item *, int), const Item *items, int n) {
  CudaCg *cu = cs(c);
  Str pre = {0}, post = {0}, lanes = {0};
  Str *body = c->body;
  memcpy(cu->sub0, c->sub, sizeof c->sub);
  cu->vec = 1, cu->nvk = 0;
  cu->vpre = &pre, cu->vpost = &post;
  c->body = &lanes;
  for (int u = 0; u < 4; u++) {
    lane_subs(c, u);
    if (cu->ptlanes) point_accs(c, items, n, u);
    fn(c, items, n);
  }
  memcpy(c->sub, cu->sub0, sizeof c->sub);
  cu->vec = 0, c->body = body, cu->nvec += cu->nvk;
  if (pre.oom || post.oom || lanes.oom) c->oom = 1;
  str_puts(body, pre.s ? pre.s : "");
  str_puts(body, lanes.s ? lanes.s : "");
  str_puts(body, post.s ? post.s : "");
  str_free(&pre), str_free(&post), str_free(&lanes);
  cu->vpre = cu->vpost = NULL;
}

/* One stage of a row or column kernel: partial reductions over this thread's
   share of the reduced elements, full-shape stores, then the combine.  In
   vector rows the thread's share is groups of 4 consecutive elements. */
static void stage(Cg *c, const Item *items, int n, const Loop *inner, int ni, int cols) {
  CudaCg *cu = cs(c);
  int64_t iext = 1;
  for (int i = 0; i < ni; i++) iext *= inner[i].n;
  if (cu->ptlanes) {  /* an accumulator per lane and reduction, numbered after the kernel's others */
    int m = 0;
    for (int i = 0; i < n; i++) m += items[i].kind == IT_REDUCE;
    cu->pacc = c->nacc, c->nacc += 4 * m;
  }
  for (int u = 0; u < (cu->ptlanes ? 4 : 1); u++) {
    if (cu->ptlanes) point_accs(c, items, n, u);
    for (int i = 0; i < n; i++)
      if (items[i].kind == IT_REDUCE) cg_red_init(c, c->g->values[items[i].v]);
  }
  int scope = c->ncse, w = cu->rowvec ? 4 : 1;
  const char *it = cu->itype;
  const char *lane = cols ? "threadIdx.y" : row_lane(c);  /* the thread's place in its row (column) */
  unsigned span = cols ? c->k->block[1] : row_span(c);
  /* the threads of a row: the block's, the launch's in a block of symbolic rows (dynblock) */
  const char *spans = !cols && cu->dynblock ? "blockDim.x" : cg_fmt(c, "%u", span);
  const char *spans4 = !cols && cu->dynblock ? "blockDim.x * 4" : cg_fmt(c, "%u", span * 4);
  if (cu->rowcache) {
    /* a fixed number of elements (groups) per thread, unrolled: the row cache's registers */
    cg_line(c, "#pragma unroll");
    cg_line(c, "for (int u = 0; u < %d; u++) {", cu->rowcache);
    c->indent++;
    if (w > 1) cg_line(c, "const %s r = (%s + u * %s) * %d;", it, lane, spans, w);
    else cg_line(c, "const %s r = %s + u * %s;", it, lane, spans);
    cg_line(c, "if (r < %s) {", cu->iext);
    c->indent++;
  } else {
    /* the block's size as a constant: the unrolled loads need no bound on
       the stride to be issued together */
    int unroll = cu->rolled                   ? 1
                 : w > 1                     ? 2
                 : cols && c->k->block[1] == 1 ? (int)iext  /* a short row: all of it */
                 : cols                      ? COL_UNROLL
                                             : 4;
    cg_line(c, "#pragma unroll %d", unroll);
    if (w > 1) cg_line(c, "for (%s r = %s * 4; r < %s; r += %s) {", it, lane, cu->iext, spans4);
    else cg_line(c, "for (%s r = %s; r < %s; r += %s) {", it, lane, cu->iext, spans);
    c->indent++;
  }
  decompose(c, inner, ni, "r");
  cu->in_row = 1;
  cu->rcmark = cu->nrc;
  cu->store_guard = cols ? "live" : NULL;
  if (w > 1 || cu->ptlanes) in_lanes(c, stage_items, items, n);
  else stage_items(c, items, n);
  cu->in_row = 0;
  c->indent--;
  cg_line(c, "}");
  if (cu->rowcache) {
    c->indent--;
    cg_line(c, "}");
  }
  c->ncse = scope;
  cu->store_guard = row_guard(c, cols);
  /* a column of one thread (short rows) holds its whole result: nothing to combine */
  cu->combine = cols ? (c->k->block[1] > 1 ? "em_col_" : NULL)
                : cu->group ? cg_fmt(c, "em_group%d_", cu->group) : "em_block_";
  if (cu->ptlanes) in_lanes(c, stage_finish, items, n);
  else stage_finish(c, items, n);
  cu->store_guard = NULL;
  cu->combine = NULL;
}

/* The items of a row or column kernel: stages, with outer items between. */
static void rows_body(Cg *c, Kernel *k, const Loop *inner, int ni, int cols) {
  CudaCg *cu = cs(c);
  int i = 0;
  while (i < k->nitems) {
    if (k->items[i].kind == IT_OUTER) {
      cu->store_guard = row_guard(c, cols);
      if (cu->ptlanes) in_lanes(c, outer_items, &k->items[i], 1);
      else outer_items(c, &k->items[i], 1);
      cu->store_guard = NULL;
      i++;
      continue;
    }
    int j = cg_stage_end(c, k, i);
    stage(c, &k->items[i], j - i, inner, ni, cols);
    i = j;
  }
}

/* The items of a pointwise kernel at the point its loop vars are declared. */
static void pw_items(Cg *c, Kernel *k) {
  for (int i = 0; i < k->nitems; i++) {
    const Value *v = c->g->values[k->items[i].v];
    Expr *idx[MAXD];
    if (k->items[i].kind == IT_REDUCE) {  /* a reduction over no dims: one element each */
      cg_red_init(c, v);
      cg_red_update(c, v);
      cg_red_finish(c, v);
      continue;
    }
    item_index(&c->x, k, v, IT_STORE, idx);
    cg_store(c, v, idx, cg_def(c, v, idx));
  }
}

/* The elements from `from` to oext, PW_UNROLL in flight per thread, one at a
   time; unrolled unless `rolled` (a path that rarely runs: NVRTC's time
   grows with every copy of the body). */
static void pw_loop(Cg *c, Kernel *k, const Loop *outer, int no, const char *from, int rolled) {
  CudaCg *cu = cs(c);
  const char *it = cu->itype;
  int scope = c->ncse;
  cg_line(c, "for (%s base = %s + (%s)blockIdx.x * blockDim.x + threadIdx.x; base < %s; base += step * %d) {",
          it, from, it, cu->oext, PW_UNROLL);
  c->indent++;
  cg_line(c, rolled ? "#pragma unroll 1" : "#pragma unroll");
  cg_line(c, "for (int u = 0; u < %d; u++) {", PW_UNROLL);
  c->indent++;
  cg_line(c, "const %s lin = base + u * step;", it);
  cg_line(c, "if (lin < %s) {", cu->oext);
  c->indent++;
  decompose(c, outer, no, "lin");
  pw_items(c, k);
  for (int i = 0; i < 3; i++) {
    c->indent--;
    cg_line(c, "}");
  }
  c->ncse = scope;
}

/* The start of a vector path: a test of its pointers' alignment (cond:
   " && <aligned>" per pointer), the scalar fallback in its else; in the
   aligned variant a plain block, the launch having checked them. */
static void aligned_test(Cg *c, const char *cond) {
  if (cs(c)->aligned_only) {
    char u[48];  /* the unaligned variant's entry point for this body */
    em_entry_name(u, sizeof u, c->k->id, 1, cs(c)->nbodies ? cs(c)->nbodies - 1 : 0);
    cg_line(c, "{  /* the pointers are aligned (checked by the launch; else %s) */", u);
  } else {
    cg_line(c, "if (true%s) {", cond);
  }
}

/* Tiled pointwise kernels: a read with unit stride along another loop than
   the innermost one, along which the kernel stores (gMLP's gate, u *
   (proj(v) + b) read transposed; an NHWC operand of an NCHW result), is a
   warp's 32 scattered elements per access.  Such a kernel takes tiles of
   TILE x TILE elements of those two loops, a block of TILE x TILE_Y
   threads each: the block first reads the operand's tile along its unit
   stride into shared memory, then computes the tile along the stores'
   loop, reading that operand back from shared memory transposed, and every
   other access as the plain kernel does.  The read: its address a constant
   step along both loops (no gathered index, no division), the two loops
   at least TILE_MIN long.  Returns 0 (emitting nothing) where no read is
   so, or where the generated reads do not match it. */
typedef struct TileRead { Cg *c; int a; const Loop *loops; int n; int v; Expr *addr; int b; } TileRead;
static void tile_read(void *ud, int r, Expr *addr) {
  TileRead *t = ud;
  Cg *c = t->c;
  if (t->addr) return;
  addr = cg_subst(c, addr);  /* over the loops' vars: a merged loop's (NHWC's h and w as one) */
  Expr *sa = ex_add(&c->x, ex_subst(&c->x, addr, t->a, ex_add(&c->x, ex_var(&c->x, t->a), ex_const(&c->x, 1))),
                    ex_mul(&c->x, addr, -1));
  if (sa->kind != E_CONST || sa->c == 1 || sa->c == 0) return;
  for (int i = 0; i < t->n - 1; i++) {
    int b = t->loops[i].var;
    Expr *sb = ex_add(&c->x, ex_subst(&c->x, addr, b, ex_add(&c->x, ex_var(&c->x, b), ex_const(&c->x, 1))),
                      ex_mul(&c->x, addr, -1));
    if (sb->kind == E_CONST && sb->c == 1 && t->loops[i].n >= TILE_MIN) {
      t->v = r, t->addr = addr, t->b = i;
      return;
    }
  }
}

static int pw_tile(Cg *c, Kernel *k, const Loop *outer, int no, int64_t *grid) {
  CudaCg *cu = cs(c);
  if (k->symbolic || no < 2 || outer[no - 1].n < TILE_MIN || strcmp(cu->itype, "int")) return 0;
  for (int i = 0; i < k->nitems; i++)
    if (k->items[i].kind != IT_STORE) return 0;
  TileRead t = {c, outer[no - 1].var, outer, no, -1, NULL, -1};
  for (int i = 0; i < k->nitems && !t.addr; i++) {
    Expr *sidx[MAXD];
    item_index(&c->x, k, c->g->values[k->items[i].v], IT_STORE, sidx);
    walk_def_reads(c->g, &c->x, k->items[i].v, sidx, tile_read, &t);
  }
  if (!t.addr) return 0;
  const Value *r = c->g->values[t.v];
  const Loop *la = &outer[no - 1], *lb = &outer[t.b];
  Loop rest[MAXD];
  int nr = 0;
  int64_t nrest = 1;
  for (int i = 0; i < no - 1; i++)
    if (i != t.b) rest[nr++] = outer[i], nrest *= outer[i].n;
  int64_t nta = (la->n + TILE - 1) / TILE, ntb = (lb->n + TILE - 1) / TILE;
  Str body = {0}, *saved = c->body;
  int indent = c->indent, ntemp = c->ntemp, scope = c->ncse;
  long divmods = c->divmods;
  c->body = &body;
  const char *na = c->names[la->var], *nb = c->names[lb->var];
  cg_line(c, "__shared__ %s em_tile[%d][%d];", cg_compute_ctype(r->dtype), TILE, TILE + 1);
  cg_line(c, "for (int blk = blockIdx.x; blk < %lld; blk += gridDim.x) {", (long long)(nta * ntb * nrest));
  c->indent++;
  cg_line(c, "const int a0 = blk %% %lld * %d, b0 = blk / %lld %% %lld * %d;", (long long)nta, TILE,
          (long long)nta, (long long)ntb, TILE);
  if (nr) {
    cg_line(c, "const int rest = blk / %lld;", (long long)(nta * ntb));
    decompose(c, rest, nr, "rest");
  }
  /* the operand's tile, read along its unit stride */
  cg_line(c, "for (int j = threadIdx.y; j < %d; j += %d) {", TILE, TILE_Y);
  c->indent++;
  cg_line(c, "const int %s = a0 + j, %s = b0 + threadIdx.x;", na, nb);
  cg_line(c, "if (%s < %lld && %s < %lld) {", na, (long long)la->n, nb, (long long)lb->n);
  c->indent++;
  const char *p = cg_param(c, r->id);
  c->used[r->id] |= 1;
  cg_line(c, "em_tile[j][threadIdx.x] = %s;", cg_load_conv(c, cg_fmt(c, "%s[%s]", p, cg_expr(c, t.addr)), r->dtype));
  c->indent--;
  cg_line(c, "}");
  c->indent--;
  cg_line(c, "}");
  cg_line(c, "__syncthreads();");
  /* the tile's elements along the stores' loop, the operand from the tile */
  cg_line(c, "for (int j = threadIdx.y; j < %d; j += %d) {", TILE, TILE_Y);
  c->indent++;
  cg_line(c, "const int %s = a0 + threadIdx.x, %s = b0 + j;", na, nb);
  cg_line(c, "if (%s < %lld && %s < %lld) {", na, (long long)la->n, nb, (long long)lb->n);
  c->indent++;
  cu->tile_v = t.v, cu->tile_a = cg_expr(c, t.addr), cu->tile_hits = 0;
  pw_items(c, k);
  cu->tile_a = NULL;
  c->indent--;
  cg_line(c, "}");
  c->indent--;
  cg_line(c, "}");
  cg_line(c, "__syncthreads();");
  c->indent--;
  cg_line(c, "}");
  c->body = saved, c->indent = indent, c->ncse = scope;
  int ok = cu->tile_hits > 0 && !body.oom;
  if (body.oom) c->oom = 1;
  if (ok) {
    str_puts(saved, body.s);
    k->block[0] = TILE, k->block[1] = TILE_Y;
    *grid = nta * ntb * nrest;
  } else {
    c->ntemp = ntemp, c->divmods = divmods;
  }
  str_free(&body);
  return ok;
}

/* The lanes' items (their text into c->body, their vector accesses into
   vpre and vpost) at steps 0..nrows-1 of the walked loop outer[wl] (its var
   now counting groups of nrows steps), or as they are where wl < 0 (nrows
   1); base: the loop substitutions the lanes start from.  Returns the op
   values the last step computed. */
static int lane_steps(Cg *c, Kernel *k, const Loop *outer, int wl, int nrows, Expr **base) {
  CudaCg *cu = cs(c);
  int ops = 0;
  memcpy(cu->sub0, base, sizeof cu->sub0);
  for (int r = 0; r < nrows; r++) {
    if (wl >= 0) {
      int w = outer[wl].var;
      Expr *at = ex_add(&c->x, ex_mul(&c->x, ex_var(&c->x, w), nrows), ex_const(&c->x, r));
      for (int d = 0; d < MAXD; d++) {
        Expr *b = base[d] ? base[d] : d == w ? ex_var(&c->x, d) : NULL;
        cu->sub0[d] = b ? ex_subst(&c->x, b, w, at) : NULL;
      }
      cu->wrow = r;
    }
    int before = c->nops;
    for (int u = 0; u < 4; u++) {
      lane_subs(c, u);
      pw_items(c, k);
    }
    ops = c->nops - before;
  }
  return ops;
}

/* Walking outer[wl] two steps a thread: how many fewer ops the second step
   computes than the first (the values that do not move along the walked
   loop, named once: a BatchNorm's per-channel scale, a squeeze-excitation
   gate); nothing of the trial is kept. */
static int walk_gain(Cg *c, Kernel *k, const Loop *outer, int wl, Expr **base) {
  CudaCg *cu = cs(c);
  Str pre = {0}, post = {0}, align = {0}, text = {0};
  Str *body = c->body, *vpre = cu->vpre, *vpost = cu->vpost, *valign = cu->valign;
  int indent = c->indent, ntemp = c->ntemp, scope = c->ncse, nvk = cu->nvk, nvchk = cu->nvchk;
  int nvdiv = cu->nvdiv, ndivuse = cu->ndivuse, nvload = cu->nvload, chains = cu->chains, nops = c->nops;
  long divmods = c->divmods;
  cu->vpre = &pre, cu->vpost = &post, cu->valign = &align, c->body = &text, cu->chains = 0;
  cu->wrows = 2, cu->wvar = outer[wl].var;
  int first = c->nops;
  int second = lane_steps(c, k, outer, wl, 2, base);
  int gain = cu->chains ? 0 : (c->nops - first - second) - second;
  cu->wrows = 0;
  c->body = body, cu->vpre = vpre, cu->vpost = vpost, cu->valign = valign;
  c->indent = indent, c->ntemp = ntemp, c->ncse = scope, cu->nvk = nvk, cu->nvchk = nvchk;
  cu->nvdiv = nvdiv, cu->ndivuse = ndivuse, cu->nvload = nvload, cu->chains = chains, c->nops = nops;
  c->divmods = divmods;
  if (pre.oom || post.oom || align.oom || text.oom) c->oom = 1;
  str_free(&pre), str_free(&post), str_free(&align), str_free(&text);
  return gain;
}

/* Pointwise lanes over several loops may walk one of the outer loops:
   each thread takes WALK_ROWS steps of it, its lanes at the same place of
   the others, so that what does not move along the walked loop is
   computed once for all of them.  A BatchNorm over NHWC data recomputed
   its channel's rsqrt(var + eps) * weight for every element; the precise
   rsqrt and the division in SiLU's sigmoid made the kernel bound by its
   instructions, not by memory.  Walking, it is as fast as Inductor's with
   the same bits (bench/results/gpu-h100-s16-2026-11-27).  The loop that
   saves the most ops, where that is at least WALK_MIN_OPS a step and the
   grid keeps WALK_MIN_BLOCKS blocks; -1 for none. */
static int pw_walk(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, Expr **base) {
  if (k->symbolic || no < 2 || oext / (4 * WALK_ROWS * PW_BLOCK) < WALK_MIN_BLOCKS) return -1;
  int best = -1, most = WALK_MIN_OPS - 1;
  for (int i = 0; i < no - 1; i++) {
    if (outer[i].n % WALK_ROWS) continue;
    int gain = walk_gain(c, k, outer, i, base);
    if (gain > most) best = i, most = gain;
  }
  return best;
}

/* A pointwise kernel whose reads or writes step by one element along its
   innermost loop: each thread takes 4 consecutive elements (lanes), those
   accesses become one vector access each (em_vec4: 16 bytes for 4-byte
   types), when every such pointer is aligned at run time; the rest of the
   elements, and everything when a pointer is not aligned, go through
   pw_loop.  Returns 0 (emitting nothing) where no access would be a vector.
   A symbolic kernel (64-bit indices) takes them at every size where 4
   divides its innermost loop (where there are several) and the strides of
   its vector accesses: a constant, or a size the call's test checks
   (vec_div4: `gelu(x * w + b)` over [s0, s1] reads w and b 4-wide where
   s1 % 4 == 0); the groups of 4 and the tail are size expressions.  A
   static kernel may walk an outer loop (pw_walk); *grid is then divided
   by the steps a thread takes. */
static int pw_lanes(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, int64_t *grid) {
  CudaCg *cu = cs(c);
  if (cu->no_vec) return 0;
  /* lanes step along the innermost loop: with several loops, 4 must divide
     it, so that the lanes of a thread share the outer loops' indices */
  if (k->symbolic) {
    if (no < 1 || (no > 1 && !outer[no - 1].sn && outer[no - 1].n % 4)) return 0;
  } else if (no < 1 || (no > 1 && outer[no - 1].n % 4) || oext < 4 * PW_BLOCK ||
             (strcmp(cu->itype, "int") && !c->g->symbolic)) {
    return 0;
  }
  for (int i = 0; i < k->nitems; i++)
    if (k->items[i].kind != IT_STORE) return 0;
  Str pre = {0}, post = {0}, align = {0}, lanes = {0};
  Str *body = c->body;
  int indent = c->indent, ntemp = c->ntemp, scope = c->ncse;
  long divmods = c->divmods;
  int nvdiv = cu->nvdiv, ndivuse = cu->ndivuse;
  Expr *base[MAXD];
  memcpy(base, c->sub, sizeof base);
  cu->vec = 1, cu->vvar = outer[no - 1].var, cu->nvk = 0, cu->nvchk = 0;
  cu->vpre = &pre, cu->vpost = &post, cu->valign = &align;
  c->body = &lanes;
  c->indent = indent + 2;
  /* a symbolic innermost loop: the lanes share the outer loops' indices where 4 divides it */
  int lanes_ok = no == 1 || !outer[no - 1].sn || vec_div4(c, outer[no - 1].sn);
  int wl = lanes_ok ? pw_walk(c, k, outer, no, oext, base) : -1, nrows = wl < 0 ? 1 : WALK_ROWS;
  cu->wrows = wl < 0 ? 0 : nrows, cu->wvar = wl < 0 ? 0 : outer[wl].var;
  if (lanes_ok) lane_steps(c, k, outer, wl, nrows, base);
  memcpy(c->sub, base, sizeof c->sub);
  cu->vec = 0, cu->wrows = 0, c->body = body, c->indent = indent, c->ncse = scope, c->divmods = divmods;
  int any = lanes_ok && cu->nvk > 0;
  if (!any || pre.oom || post.oom || align.oom || lanes.oom) {
    if (pre.oom || post.oom || align.oom || lanes.oom) c->oom = 1;
    c->ntemp = ntemp;
    cu->nvdiv = nvdiv;
  } else {
    const char *it = cu->itype;
    long long nq = (long long)(oext / 4);
    const char *nqs = cg_fmt(c, "%lld", nq / nrows), *tail = oext % 4 ? cg_fmt(c, "%lld", nq * 4) : NULL;
    Loop walked[MAXD];  /* the walked loop's var counts groups of its steps */
    memcpy(walked, outer, sizeof *outer * (size_t)no);
    if (wl >= 0) {
      walked[wl].n /= nrows;
      *grid = (*grid + nrows - 1) / nrows;
      cu->walked = cg_fmt(c, ", %d steps of %s a thread", nrows, c->names[outer[wl].var]);
    }
    if (k->symbolic) {  /* the groups of 4 and where the tail starts, at the call's sizes */
      Expr *so = loops_ext(c, outer, no), *q = ex_div(&c->x, so, 4);
      Expr *rem = ex_mod(&c->x, so, 4);
      nqs = cg_size(c, q);
      tail = rem->kind == E_CONST && rem->c == 0 ? NULL : cg_fmt(c, "%s * 4", ext_operand(c, q));
    }
    aligned_test(c, align.s);
    c->indent++;
    cg_line(c, "for (%s q = (%s)blockIdx.x * blockDim.x + threadIdx.x; q < %s; q += step) {", it, it, nqs);
    c->indent++;
    cg_line(c, "const %s lin = q * 4;", it);
    decompose(c, walked, no, "lin");
    str_puts(c->body, pre.s ? pre.s : "");
    str_puts(c->body, lanes.s ? lanes.s : "");
    str_puts(c->body, post.s ? post.s : "");
    c->indent--;
    cg_line(c, "}");
    if (tail) pw_loop(c, k, outer, no, tail, 1);  /* at most 3 elements */
    c->indent--;
    if (!cu->aligned_only) {
      cg_line(c, "} else {");
      c->indent++;
      /* a pointer not 16-byte aligned (a view at an odd offset): rare, so
         rolled, which takes over a third off NVRTC's time for the kernel;
         not where it is the path of sizes 4 does not divide (vec_div4) */
      pw_loop(c, k, outer, no, "0", cu->ndivuse == ndivuse);
      c->indent--;
      cu->has_alt = 1;
    }
    cg_line(c, "}");
  }
  str_free(&pre), str_free(&post), str_free(&align), str_free(&lanes);
  cu->vpre = cu->vpost = cu->valign = NULL;
  return any;
}

/* The rows of a row kernel: a block per outer point, or in row groups a
   group of lanes per outer point, block[0] / group rows per block.  A
   group's rows are its own (no thread of another group waits on it), so a
   group past the last row just leaves the loop. */
static void row_loop(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, const Loop *inner, int ni) {
  CudaCg *cu = cs(c);
  const char *it = cu->itype;
  if (cu->group) {
    unsigned rows = k->block[0] / (unsigned)cu->group;
    cg_line(c, "for (%s o = (%s)blockIdx.x * %u + (%s)(threadIdx.x / %d); o < %s; o += (%s)gridDim.x * %u) {",
            it, it, rows, it, cu->group, cu->oext, it, rows);
    c->indent++;
    cg_line(c, "const int gl = threadIdx.x %% %d;  /* the lane's place in its row's group */", cu->group);
  } else {
    cg_line(c, "for (%s o = blockIdx.x; o < %s; o += gridDim.x) {", it, cu->oext);
    c->indent++;
  }
  decompose(c, outer, no, "o");
  rows_body(c, k, inner, ni, 0);
  c->indent--;
  cg_line(c, "}");
}

/* The columns of a column kernel: block[0] outer points per block, a
   thread each, block[1] threads down each column; a thread past the last
   point (not `live`) reads the last one's column and stores nothing, since
   its block's combines need it.  oext < 0: the number of columns is the
   symbolic kernel's size expression (cu->oext; the launch gives no block
   where it is 0).  In point lanes (static) a thread takes the 4 points
   from o: ob counts groups of 4. */
static void col_loop(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, const Loop *inner, int ni) {
  CudaCg *cu = cs(c);
  const char *it = cu->itype;
  unsigned bx = k->block[0];
  int64_t w = cu->ptlanes ? 4 : 1;
  const char *n = oext >= 0 ? cg_fmt(c, "%lld", (long long)(oext / w))
                : w > 1   ? cg_fmt(c, "(%s) / %lld", cu->oext, (long long)w) : cu->oext;
  const char *last = oext >= 0 ? cg_fmt(c, "%lld", (long long)(oext / w - 1)) : cg_fmt(c, "(%s) - 1", n);
  cg_line(c, "for (%s ob = (%s)blockIdx.x * %u; ob < %s; ob += (%s)gridDim.x * %u) {", it, it, bx, n, it, bx);
  c->indent++;
  cg_line(c, "const bool live = ob + threadIdx.x < %s;", n);
  if (w > 1) cg_line(c, "const %s o = (live ? ob + threadIdx.x : %s) * %lld;", it, last, (long long)w);
  else cg_line(c, "const %s o = live ? ob + threadIdx.x : %s;", it, last);
  decompose(c, outer, no, "o");
  rows_body(c, k, inner, ni, 1);
  c->indent--;
  cg_line(c, "}");
}

/* Vector rows: where the innermost reduced loop's length is a multiple of
   4, each thread takes groups of 4 consecutive elements, and the accesses
   with unit stride along that loop become one 16-byte access per group
   (for 4-byte types; fewer instructions in flight per byte than one load
   per element).  The kernel runs them when every such pointer is aligned
   (checked once at run time) and the scalar rows otherwise.  Returns 0
   (emitting nothing) where no access would be a vector, else 2 if the
   vector rows keep the row in registers, 1 if not.  Faster than scalar
   rows on layer norm, softmax, inner-dim sums and BatchNorm statistics;
   it doubles the source NVRTC compiles for each row kernel.
   Columns (cols) the same, each thread of a column taking groups of 4
   consecutive elements down it: a column kernel whose stores run along the
   reduced dim (a LayerNorm over the channels of [B, C, T] data whose result
   is [B, T, C]) stores 4 elements a thread at once where a warp's scalar
   stores wrote 2 or 4 bytes to each of 16 sectors. */
static int row_vec(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, const Loop *inner, int ni,
                   int64_t cache, int cols) {
  CudaCg *cu = cs(c);
  if (cu->no_vec) return 0;
  /* 32-bit indices, but for a symbolic graph's (64 bits at every size) */
  if (ni < 1 || (!inner[ni - 1].sn && inner[ni - 1].n % 4) || (strcmp(cu->itype, "int") && !c->g->symbolic)) return 0;
  int64_t iext = 1;
  int sym = 0;  /* a row (column) of symbolic length: `cache` elements a thread in registers, or none */
  for (int i = 0; i < ni; i++) iext *= inner[i].n, sym |= inner[i].sn != NULL;
  int64_t span = cols ? k->block[1] : row_span(c), groups = sym ? cache / 4 : (iext + 4 * span - 1) / (4 * span);
  void (*loop)(Cg *, Kernel *, const Loop *, int, int64_t, const Loop *, int) = cols ? col_loop : row_loop;
  Str vbody = {0}, align = {0};
  Str *body = c->body;
  int indent = c->indent, ntemp = c->ntemp, rowcache = cu->rowcache, scope = c->ncse, nrcnames = cu->nrcnames;
  long divmods = c->divmods;
  size_t ndecls = cu->decls->len;
  c->body = &vbody, c->indent = indent + 1;
  cu->rowvec = 1, cu->colvec = cols, cu->nvec = 0, cu->vvar = inner[ni - 1].var, cu->valign = &align, cu->nvchk = 0;
  cu->rowcache = groups * 4 <= cache ? (int)groups : 0;
  int vcache = cu->rowcache, nvdiv = cu->nvdiv, ndivuse = cu->ndivuse;
  /* a symbolic innermost reduced loop: the groups of 4 are whole where 4 divides it */
  int ok = !inner[ni - 1].sn || vec_div4(c, inner[ni - 1].sn);
  if (ok) loop(c, k, outer, no, oext, inner, ni);
  cu->rowvec = cu->colvec = 0, cu->valign = NULL, c->body = body, c->indent = indent, cu->nrc = cu->rcmark = 0;
  c->ncse = scope;  /* nothing named in the vector rows is in scope in the scalar ones */
  cu->rowcache = rowcache;
  int any = ok && cu->nvec > 0 && !vbody.oom && !align.oom;
  if (!any) cu->nvdiv = nvdiv;
  if (vbody.oom || align.oom) c->oom = 1;
  if (any) {
    aligned_test(c, align.s ? align.s : "");
    str_puts(body, vbody.s ? vbody.s : "");
    /* the scalar rows, for a pointer not 16-byte aligned: rare, so rolled
       and without the row cache.  With the pointwise fallback's the same,
       NVRTC's time for a graph falls by a tenth to a third; the vector
       paths' source is unchanged, no kernel uses more registers, and they
       cost nothing at run time against unrolled ones. */
    if (!cu->aligned_only) {
      cg_line(c, "} else {");
      c->indent++;
      /* ... but where it is the path of the sizes 4 does not divide (a symbolic row's
         length: vec_div4), the scalar rows as they would be without vector rows */
      if (cu->ndivuse == ndivuse) cu->rowcache = 0, cu->rolled = 1;
      loop(c, k, outer, no, oext, inner, ni);
      cu->rowcache = rowcache, cu->rolled = 0;
      c->indent--;
      cu->has_alt = 1;
    }
    cg_line(c, "}");
  } else {
    /* nothing of the vector rows is kept: their row cache's declarations neither */
    c->ntemp = ntemp, c->divmods = divmods, cu->nrcnames = nrcnames;
    if (cu->decls->s && cu->decls->len > ndecls) cu->decls->s[ndecls] = 0, cu->decls->len = ndecls;
  }
  str_free(&vbody), str_free(&align);
  return any ? 1 + (vcache > 0) : 0;
}

/* Point lanes: short rows (a thread per output point, short_rows) whose
   innermost outer loop, the threads' fastest index, has a length 4
   divides: each thread takes 4 consecutive output points along it (lanes,
   an accumulator each: a 3x3 max pool's 4 channels of one NHWC window),
   and the reads with unit stride along it become one vector load per
   window element (vec_reg: 8 bytes of a 16-bit activation, 16 of a
   BatchNorm's per-channel float parameters) where a thread made a 2-byte
   load per element, the results one vector store.  The kernel runs them
   when every such pointer is aligned (checked once at run time), else the
   scalar short rows, rolled as the fallback of vector rows is, in the
   lanes' grid: a quarter of the threads, each taking its 4 points in turn.
   Returns 0 (emitting nothing) where no load would be a vector (a thread's
   4 windows each read apart, its store alone 4-wide: NCHW windows, or
   rows contiguous along the window), where the kernel stores along the
   window (a full-shape item), or where it reads a cat through its branches
   (its inputs' vector loads would be made before them, every input's:
   vec_a0).  A symbolic kernel takes them where that loop's length is a
   constant (the channels of a pool over a symbolic batch and image: oext
   -1, the count of points a size expression that 4 divides). */
static int point_lanes(Cg *c, Kernel *k, const Loop *outer, int no, int64_t oext, const Loop *inner, int ni) {
  CudaCg *cu = cs(c);
  if (cu->no_vec || no < 1 || outer[no - 1].sn || outer[no - 1].n % 4 ||
      (strcmp(cu->itype, "int") && !c->g->symbolic))
    return 0;
  for (int i = 0; i < k->nitems; i++)
    if (k->items[i].kind == IT_STORE) return 0;
  Str vbody = {0}, align = {0};
  Str *body = c->body;
  int indent = c->indent, ntemp = c->ntemp, scope = c->ncse, nacc = c->nacc;
  long divmods = c->divmods;
  c->body = &vbody, c->indent = indent + 1;
  cu->ptlanes = cu->colvec = 1, cu->nvec = cu->nvload = 0, cu->chains = 0, cu->vvar = outer[no - 1].var;
  cu->valign = &align, cu->nvchk = 0;
  col_loop(c, k, outer, no, oext, inner, ni);
  long lanes = c->divmods;  /* a loop merge weighs the lanes' indices, not their fallback's too (gen_kernel) */
  cu->ptlanes = cu->colvec = 0, cu->valign = NULL, c->body = body, c->indent = indent;
  c->ncse = scope;  /* nothing named in the lanes is in scope in the scalar rows */
  /* the scalar rows' accumulators numbered from the first again, a reduction's as in a kernel without lanes */
  for (int i = 0; i < k->nitems; i++)
    if (k->items[i].kind == IT_REDUCE) c->acc[k->items[i].v] = 0;
  c->nacc = nacc;
  int any = cu->nvload > 0 && !cu->chains && !vbody.oom && !align.oom;
  if (vbody.oom || align.oom) c->oom = 1;
  if (any) {
    aligned_test(c, align.s ? align.s : "");
    str_puts(body, vbody.s ? vbody.s : "");
    if (!cu->aligned_only) {
      cg_line(c, "} else {");
      c->indent++;
      cu->rolled = 1;
      col_loop(c, k, outer, no, oext, inner, ni);
      cu->rolled = 0;
      c->indent--;
      cu->has_alt = 1;
      c->divmods = lanes;
    }
    cg_line(c, "}");
  } else {
    c->ntemp = ntemp, c->divmods = divmods, cu->nvchk = 0;
  }
  str_free(&vbody), str_free(&align);
  return any;
}

/* The grid of a kernel that takes `per` outer points per block, over n points: a
   size expression, at most MAX_GRID (the loops stride by the grid). */
static Expr *sym_grid(Cg *c, Expr *n, int64_t per) {
  Expr *blocks = per > 1 ? ex_div(&c->x, ex_add(&c->x, n, ex_const(&c->x, per - 1)), per) : n;
  return ex_min(&c->x, blocks, MAX_GRID);
}

/* 1 where the size expression n is over t, else 0, as a size expression. */
static Expr *sym_over(Cg *c, Expr *n, int64_t t) {
  return ex_min(&c->x, ex_max(&c->x, ex_add(&c->x, n, ex_const(&c->x, -t)), 0), 1);
}

/* row_block(n) at the call's n, as a size expression (Kernel.sblock): 64
   threads, doubled at each of n > 64 * ROW_PER, 128 * ROW_PER, ... up to
   ROW_MAXB, so that a thread has at most ROW_PER elements of a row of up
   to ROW_MAXB * ROW_PER. */
static Expr *sym_row_block(Cg *c, Expr *n) {
  Expr *b = ex_const(&c->x, 64);
  for (int64_t t = 64; t < ROW_MAXB; t *= 2) b = ex_add(&c->x, b, ex_mul(&c->x, sym_over(c, n, t * ROW_PER), t));
  return b;
}

/* The stages of a row (column) kernel: more than one reads the row again. */
static int row_stages(Cg *c, Kernel *k) {
  int n = 0;
  for (int i = 0; i < k->nitems; n++) {
    while (i < k->nitems && k->items[i].kind == IT_OUTER) i++;
    if (i == k->nitems) break;
    i = cg_stage_end(c, k, i);
  }
  return n;
}

/* The sizes a symbolic kernel's vector paths take 4 to divide (vec_div4), as "s1, s0*s1". */
static const char *vdiv_list(Cg *c) {
  CudaCg *cu = cs(c);
  const char *w = "";
  for (int i = 0; i < cu->nvdiv; i++) w = cg_fmt(c, "%s%s%s", w, i ? ", " : "", cg_size(c, cu->vdiv[i]));
  return w;
}

/* ... as what their test checks besides the pointers: " and 4 divides s1", or "". */
static const char *vdiv_words(Cg *c) {
  return cs(c)->nvdiv ? cg_fmt(c, " and 4 divides %s", vdiv_list(c)) : "";
}

/* Begins the next body of a kernel whose bodies the launch chooses by the
   call's sizes: its text and declarations go to strings of their own, and
   cuda_kernel makes each body an entry point (em_entry_name) with its own
   __launch_bounds__, `threads` a block and `blocks` an SM (0: not said).
   In one function, ptxas gives every body the registers the hungriest one
   takes, under one bound: the bodies that keep a row in registers made the
   one that reads a long row again spill.  The launch runs this body where
   the call's length si is over `over` (-1: the first body), each body
   taking longer ones than the one before (Kernel.sbody: the sum of those
   tests). */
static void sym_entry(Cg *c, Kernel *k, Expr *si, int64_t over, unsigned threads, int blocks, const char *what) {
  CudaCg *cu = cs(c);
  int i = cu->nbodies++;
  EM_ASSERT(i < MAX_BODIES && (i == 0) == (over < 0) && (i == 0 || over > cu->body[i - 1].over));
  if (i == 0) {
    EM_ASSERT(c->body->len == 0 && cu->decls->len == 0);  /* nothing before the first body: each is all its entry */
  } else {
    c->body = &cu->ebody[i], cu->decls = &cu->edecls[i];
    Expr *t = sym_over(c, si, over);
    k->sbody = k->sbody ? ex_add(&c->x, k->sbody, t) : t;
  }
  c->indent = 1;
  cu->body[i] = (Body){threads, blocks, over, what};
}

/* One body of a symbolic kernel's rows (columns) of symbolic length:
   `cache` elements a thread in registers (0: none, each stage reads the
   row again), vector rows where the call's sizes and pointers allow.
   Returns row_vec's answer. */
static int sym_body(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, int64_t cache, int cols) {
  CudaCg *cu = cs(c);
  int scope = c->ncse;
  cu->rowcache = (int)cache;
  int vec = row_vec(c, k, outer, no, -1, inner, ni, cache, cols);
  if (!vec && cols) col_loop(c, k, outer, no, -1, inner, ni);
  else if (!vec) row_loop(c, k, outer, no, -1, inner, ni);
  cu->rowcache = 0, cu->nrc = cu->rcmark = 0;
  c->ncse = scope;  /* nothing named in one body is in scope in the other */
  return vec;
}

/* Rows (columns) of symbolic length si whose kernel reads them in several
   stages: two bodies, the row in registers where the call's length is at
   most `keep` (cache elements a thread), else read again by each stage;
   one body, the row not kept, where a stage reads it once.  Each is an
   entry point (sym_entry) where the kernel has more than one body, the
   first taken where the length is over `over` (-1: it is the kernel's
   first); bound[0] the kept body's bound, bound[1] the other's.  Returns
   whether a body has vector rows; *kept: the first body's words. */
static int sym_bodies(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, Expr *si, int64_t over,
                      int64_t keep, int64_t cache, const Body bound[2], int cols, const char **kept) {
  CudaCg *cu = cs(c);
  const char *what = cols ? "column" : "row", *per = cols ? "" : "a block per row, ";
  *kept = "";
  if (row_stages(c, k) < 2) {
    if (over >= 0)
      sym_entry(c, k, si, over, bound[1].threads, bound[1].blocks, cg_fmt(c, "%sa longer %s, read once", per, what));
    return sym_body(c, k, outer, no, inner, ni, 0, cols);
  }
  sym_entry(c, k, si, over, bound[0].threads, bound[0].blocks,
            cg_fmt(c, "%sthe %s in registers, at most %lld elements a thread", per, what, (long long)cache));
  int vkeep = sym_body(c, k, outer, no, inner, ni, cache, cols);
  sym_entry(c, k, si, keep, bound[1].threads, bound[1].blocks,
            cg_fmt(c, "%sa longer %s: each stage reads it again", per, what));
  int vec = sym_body(c, k, outer, no, inner, ni, 0, cols);
  *kept = cg_fmt(c, ", the %s in registers where %s <= %lld", what, cu->iext, (long long)keep);
  return vkeep || vec;
}

/* A symbolic kernel's rows of symbolic length (and more of them than a
   few): the static rows' choices at the call's length, each a body of the
   kernel (sym_entry) that the launch chooses, with the block and grid.  A
   row of at most GROUP_ROW: a warp each (a row group of 32 lanes,
   ROWCACHE_MAX elements a lane in registers), GROUP_THREADS / 32 rows a
   block of GROUP_THREADS, where a block of 64 threads would leave most idle
   and combine through shared memory (the static rows' group_lanes takes 4
   to 32 lanes by the length).  A longer row: a block each, row_block of the
   length (sym_row_block: ROW_PER elements a thread up to rows of ROW_MAXB *
   ROW_PER), its threads striding by blockDim.x (dynblock); the row in
   registers where the static rows keep it (a row of at most ROWCACHE_LEN,
   or of up to ROW_MAXB * ROW_PER read from several tensors), in a body
   bounded by the block of the longest such row, as a static kernel is by
   its own; else a body that reads it again.  That body, of rows read from
   one tensor, is bounded for two blocks of ROW_MAXB an SM (32 registers a
   thread on sm_90), which it needs no more than; of rows from several
   tensors, for one (the 64 registers a block of ROW_MAXB allows).  Vector
   rows in every body where the pointers are aligned and 4 divides the
   length, tested by the launch (Kernel.svec), which runs the unaligned
   variant otherwise. */
static const char *sym_rows(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, Expr *so,
                            Expr *si, unsigned *bx, Expr **gx) {
  CudaCg *cu = cs(c);
  unsigned rows = GROUP_THREADS / 32;  /* a warp's rows per block */
  Expr *warp = ex_add(&c->x, ex_const(&c->x, 1), ex_mul(&c->x, sym_over(c, si, GROUP_ROW), -1));  /* 1: a warp a row */
  Expr *wgrid = ex_div(&c->x, ex_add(&c->x, so, ex_const(&c->x, rows - 1)), rows);
  *bx = ROW_MAXB;  /* the most the launch gives */
  *gx = ex_min(&c->x, ex_add(&c->x, so, ex_mul_e(&c->x, warp, ex_sub(&c->x, wgrid, so))), MAX_GRID);
  k->sblock = ex_add(&c->x, sym_row_block(c, si), ex_mul(&c->x, warp, GROUP_THREADS - 64));
  k->block[0] = GROUP_THREADS, k->block[1] = 1;  /* the warps' rows per block (row_loop) */
  const char *warps = cg_fmt(c, "a warp per row, %u rows a block, the row in registers", rows);
  sym_entry(c, k, si, -1, GROUP_THREADS, 0, warps);
  cu->group = 32;
  int vwarp = sym_body(c, k, outer, no, inner, ni, ROWCACHE_MAX, 0);
  cu->group = 0;
  k->block[0] = ROW_MAXB;
  cu->dynblock = 1;
  int64_t keep = row_roots(c, k, REREAD_ROOTS) <= REREAD_ROOTS ? ROWCACHE_LEN : (int64_t)ROW_MAXB * ROW_PER;
  const Body bound[2] = {{row_block(keep), 0, 0, NULL}, {ROW_MAXB, keep == ROWCACHE_LEN ? 2 : 1, 0, NULL}};
  const char *kept;
  int vec = sym_bodies(c, k, outer, no, inner, ni, si, GROUP_ROW, keep, ROW_PER, bound, 0, &kept) || vwarp;
  cu->dynblock = 0;
  return cg_fmt(c, "a warp per row, %u rows a block where %s <= %d, else a block per row, 64 to %d threads by the "
                "call's row length (%d elements a thread)%s%s%s (symbolic sizes)", rows, cu->iext, GROUP_ROW, ROW_MAXB,
                ROW_PER, kept, vec ? ", 4 consecutive elements per thread where aligned" : "",
                vec ? vdiv_words(c) : "");
}

/* A symbolic kernel's columns whose number is symbolic: the column schedule
   with a constant block, COL_MIN_X columns of COL_Y threads (the static
   columns' shape for up to a few thousand columns; a column of constant
   length at most COL_Y / 2 gets fewer threads, as there), the grid a size
   expression.  The column in registers where it has at most COL_CACHE /
   (COL_MIN_X * COL_Y) elements a thread: decided here for a constant
   length, by the launch for a symbolic one: two bodies, bounded by the
   block, the one that keeps the column for one block an SM (said: under
   the block alone, ptxas gave a LayerNorm over channels fewer registers
   than its column takes, and spilled); vector columns (stores along the
   column) as in rows. */
static const char *sym_cols(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, Expr *so,
                            Expr *si, unsigned *bx, unsigned *by, Expr **gx) {
  CudaCg *cu = cs(c);
  int64_t iext = si->kind == E_CONST ? si->c : -1;
  *bx = COL_MIN_X, *by = COL_Y;
  while (iext >= 0 && *by > 8 && *by / 2 >= iext) *by /= 2;  /* a short column: no idle threads */
  *gx = sym_grid(c, so, *bx);
  k->block[0] = *bx, k->block[1] = *by;
  int64_t cache = COL_CACHE / ((int64_t)*bx * *by);
  const char *kept = "";
  int vec;
  if (iext >= 0) {
    int64_t per = (iext + *by - 1) / *by;
    if (per > 1 && per <= cache) cu->rowcache = (int)per, kept = ", the column in registers";
    vec = row_vec(c, k, outer, no, -1, inner, ni, cache, 1);
    if (!vec) col_loop(c, k, outer, no, -1, inner, ni);
    cu->rowcache = 0;
  } else {
    const Body bound[2] = {{*bx * *by, 1, 0, NULL}, {*bx * *by, 0, 0, NULL}};
    vec = sym_bodies(c, k, outer, no, inner, ni, si, -1, cache * *by, cache, bound, 1, &kept);
  }
  return cg_fmt(c, "a thread column per output point%s%s%s (symbolic sizes)", kept,
                vec ? ", 4 consecutive elements per thread where aligned" : "", vec ? vdiv_words(c) : "");
}

/* A kernel whose space has symbolic sizes: one schedule that is right for
   every size, since the choices the static path makes from the outer
   extent (short rows, a row group's rows per block, 32-bit indices) are not
   known until the call.  Pointwise: the grid-stride loop, 4 consecutive
   elements per thread where aligned as in static kernels (pw_lanes), else
   scalar elements.  Reductions: the column schedule (column_schedule) over
   a constant number of columns as in static kernels, over a symbolic
   number with a constant block (sym_cols); else a block per row, or where
   the row has a constant length of at most GROUP_ROW a row group
   (GROUP_THREADS threads a block); the row in registers where its constant
   length allows, and vector rows where 4 divides it, as in static rows; a
   row whose length is a size expression gets the static rows' choices at
   the call's length (sym_rows: the block, the row in registers, vector
   rows), or where there are fewer than FEW_BLOCKS rows, ROW_MAXB threads
   striding over it.  *gx: the grid as an expression over the size
   variables, which the launch evaluates per call (run.c), as it does the
   block (Kernel.sblock) and the vector paths' sizes (Kernel.svec). */
static const char *sym_schedule(Cg *c, Kernel *k, const Loop *outer, int no, const Loop *inner, int ni, Expr *so,
                                Expr *si, unsigned *bx, unsigned *by, Expr **gx) {
  CudaCg *cu = cs(c);
  const char *it = cu->itype;
  if (k->rmask == 0) {
    *bx = PW_BLOCK;
    *gx = sym_grid(c, so, (int64_t)PW_BLOCK * PW_UNROLL);
    cg_line(c, "const %s step = (%s)gridDim.x * blockDim.x;", it, it);
    int64_t unused = 0;
    if (pw_lanes(c, k, outer, no, -1, &unused))
      return cg_fmt(c, "pointwise, 4 consecutive elements per thread where aligned%s (symbolic sizes)", vdiv_words(c));
    pw_loop(c, k, outer, no, "0", 0);
    return "pointwise (symbolic sizes)";
  }
  int64_t iext = si->kind == E_CONST ? si->c : -1;
  if (sym_short_rows(inner, ni)) {
    /* short rows of a constant length: a thread each, as static ones where there are many, 4
       points a thread where the innermost outer loop's constant length allows (point_lanes) */
    int64_t oc = so->kind == E_CONST ? so->c : -1;
    *bx = SHORT_X, *by = 1;
    k->block[0] = SHORT_X, k->block[1] = 1;
    if (point_lanes(c, k, outer, no, oc, inner, ni)) {
      *gx = sym_grid(c, ex_div(&c->x, so, 4), SHORT_X);
      return "a thread per output point (short rows, symbolic sizes), 4 consecutive points per thread where "
             "aligned";
    }
    *gx = sym_grid(c, so, SHORT_X);
    col_loop(c, k, outer, no, oc, inner, ni);
    return "a thread per output point (short rows, symbolic sizes)";
  }
  int cols = column_schedule(c, k);
  if (so->kind == E_CONST && cols) {
    /* a constant number of columns over a symbolic length (a bias's gradient over a symbolic
       batch): the static columns, col_threads' threads down each at every length, the column
       not in registers */
    *bx = col_x(so->c), *by = col_threads(so->c);
    if (*bx * *by > 1024) *by = 1024 / *bx;
    *gx = sym_grid(c, so, *bx);
    k->block[0] = *bx, k->block[1] = *by;
    col_loop(c, k, outer, no, so->c, inner, ni);
    return "a thread column per output point (symbolic sizes)";
  }
  if (cols) return sym_cols(c, k, outer, no, inner, ni, so, si, bx, by, gx);
  if (iext > 0 && iext <= GROUP_ROW) {
    unsigned w = group_lanes(iext), rows = GROUP_THREADS / w;
    *bx = w * rows;
    *gx = sym_grid(c, so, rows);
    k->block[0] = *bx, k->block[1] = 1;
    cu->group = (int)w;
    cu->rowcache = (int)((iext + w - 1) / w);
    int vec = row_vec(c, k, outer, no, -1, inner, ni, ROWCACHE_MAX, 0);
    if (!vec) row_loop(c, k, outer, no, -1, inner, ni);
    cu->group = 0;
    return cg_fmt(c, "%u lanes per row, %u rows per block, the row in registers%s%s (symbolic sizes)", w, rows,
                  vec ? ", 4 consecutive elements per lane where aligned" : "", vec ? vdiv_words(c) : "");
  }
  if (iext < 0 && !(so->kind == E_CONST && so->c < FEW_BLOCKS)) return sym_rows(c, k, outer, no, inner, ni, so, si, bx, gx);
  /* a row of constant length; a row of symbolic length, of which there are a few (a full
     reduction: split.c does not split symbolic ones): ROW_MAXB threads */
  *bx = iext >= 0 ? row_block(iext) : ROW_MAXB;
  *gx = sym_grid(c, so, 1);
  k->block[0] = *bx, k->block[1] = 1;
  const char *shape = "a block per row (symbolic sizes)";
  /* the static rows' register rule for a constant length; vector rows (for a symbolic length
     where the launch finds 4 divides it) */
  int64_t per = iext > 0 ? (iext + *bx - 1) / *bx : 0, cache = iext > 0 ? ROWCACHE_MAX : 0;
  if (iext > ROWCACHE_LEN && row_roots(c, k, REREAD_ROOTS) <= REREAD_ROOTS) cache = 0;
  if (per > 0 && per <= cache) cu->rowcache = (int)per, shape = "a block per row, the row in registers (symbolic sizes)";
  int vec = iext != 0 ? row_vec(c, k, outer, no, -1, inner, ni, cache, 0) : 0;
  if (vec) return cg_fmt(c, "a block per row%s, 4 consecutive elements per thread where aligned%s (symbolic sizes)",
                         vec > 1 ? ", the row in registers" : "", vdiv_words(c));
  row_loop(c, k, outer, no, -1, inner, ni);
  return shape;
}

/* The launch shape of one generation of a kernel's body. */
typedef struct Launch {
  const char *shape;       /* in words, for the kernel's comment */
  unsigned bx, by;         /* the block */
  int empty;               /* no output point: nothing to launch */
  int nbodies;             /* the kernel's bodies, each an entry point (sym_entry) */
  Body body[MAX_BODIES];   /* ... what each is, where there are several */
} Launch;

/* One generation of k's bodies (and the declarations before each), of the
   variant cu->aligned_only says, into body[i] and decls[i] (MAX_BODIES
   each); c->used says which values they read and write. */
static void cuda_body(Cg *c, Kernel *k, uint32_t merge, Str *body, Str *decls, Launch *L) {
  CudaCg *cu = cs(c);
  cg_begin(c, k, &body[0]);
  cu->store_guard = NULL;
  cu->combine = NULL;
  cu->rowcache = 0;
  cu->nrc = cu->rcmark = 0;
  cu->nrcnames = 0;
  cu->rolled = 0;
  cu->nvchk = 0, cu->has_alt = 0;
  cu->nvdiv = 0, cu->dynblock = 0;
  cu->decls = &decls[0];
  cu->ebody = body, cu->edecls = decls, cu->nbodies = 0;
  cu->kstages = k->rmask ? row_stages(c, k) : 0;
  Loop outer[MAXD], inner[MAXD];
  int no = cg_loops(c, k, 0, merge, outer), ni = cg_loops(c, k, 1, merge, inner);
  int64_t oext = 1, iext = 1;
  for (int i = 0; i < no; i++) oext *= outer[i].n;
  for (int i = 0; i < ni; i++) iext *= inner[i].n;
  /* a reduction of short rows: a thread per row (in a symbolic kernel, rows of a constant
     length at every count: sym_short_rows) */
  int one = k->rmask && (k->symbolic ? sym_short_rows(inner, ni) : short_rows(iext, oext));
  cg_order_loops(c, k, outer, no, one);
  int empty = 0;  /* no output point: nothing to launch (an empty reduced dim still stores the identity) */
  for (int d = 0; d < k->ndim; d++) empty |= k->size[d] == 0 && !(k->rmask >> d & 1);
  /* a symbolic graph's indices are 32-bit ints, its vector paths' too, where a launch finds them
     small enough at the call's sizes (Kernel.swide), else the wide variant's are 64-bit */
  if (c->g->symbolic) cu->itype = cu->wide ? "int64_t" : "int";
  else cu->itype = small_indices(c, oext, iext) ? "int" : "int64_t";
  const char *it = cu->itype;
  Expr *so = NULL, *si = NULL;  /* a symbolic kernel's extents as expressions */
  if (k->symbolic) {
    so = loops_ext(c, outer, no), si = loops_ext(c, inner, ni);
    cu->oext = so->kind == E_CONST ? cg_fmt(c, "%lld", (long long)so->c) : cg_size(c, so);
    cu->iext = si->kind == E_CONST ? cg_fmt(c, "%lld", (long long)si->c) : cg_size(c, si);
  } else {
    cu->oext = cg_fmt(c, "%lld", (long long)oext), cu->iext = cg_fmt(c, "%lld", (long long)iext);
  }
  c->indent = 1;
  unsigned bx, by = 1;
  int64_t grid;
  const char *shape;
  k->sgrid = k->sblock = k->sbody = NULL;
  if (k->symbolic) {
    shape = sym_schedule(c, k, outer, no, inner, ni, so, si, &bx, &by, &k->sgrid);
    grid = 1;  /* the launch's is k->sgrid at the call's sizes */
  } else if (k->rmask == 0) {
    /* pointwise: a grid-stride loop, PW_UNROLL independent elements in flight
       per thread; 16-byte accesses where the data allow (pw_lanes) */
    shape = "pointwise";
    bx = PW_BLOCK;
    grid = (oext + (int64_t)bx * PW_UNROLL - 1) / ((int64_t)bx * PW_UNROLL);
    if (pw_tile(c, k, outer, no, &grid)) {
      bx = TILE, by = TILE_Y;
      shape = cg_fmt(c, "pointwise, %dx%d tiles, an operand transposed through shared memory", TILE, TILE);
    } else {
      cg_line(c, "const %s step = (%s)gridDim.x * blockDim.x;", it, it);
      cu->walked = "";
      if (pw_lanes(c, k, outer, no, oext, &grid))
        shape = cg_fmt(c, "pointwise, 4 consecutive elements per thread where aligned%s", cu->walked);
      else pw_loop(c, k, outer, no, "0", 0);
    }
  } else if (one || column_schedule(c, k)) {
    /* columns: col_x() outer points per block, col_threads() threads down each;
       short rows: SHORT_X points per block, one thread each */
    shape = one ? "a thread per output point (short rows)" : "a thread column per output point";
    bx = one ? SHORT_X : col_x(oext), by = one ? 1 : col_threads(oext);
    if (bx * by > 1024) by = 1024 / bx;
    while (by > 8 && by / 2 >= iext) by /= 2;  /* a short column (a split's 8 partials): no idle threads */
    grid = (oext + bx - 1) / bx;
    k->block[0] = bx, k->block[1] = by;
    /* a column of a few elements per thread (a LayerNorm over the channels
       of [B, C, T] data: 768 in 32 threads) is held in registers, as a row
       is (the row cache): the later stages read it there, not again through
       L2, and the first stage's loads are unrolled, all in flight at once
       (COL_UNROLL's 4 two-byte loads a thread were too few for a GPU with
       under a wave of such blocks) */
    int64_t per = (iext + by - 1) / by, cache = one ? 0 : COL_CACHE / ((int64_t)bx * by);
    if (per > 1 && per <= cache) {
      cu->rowcache = (int)per;
      shape = "a thread column per output point, the column in registers";
    }
    int vec = one ? 0 : row_vec(c, k, outer, no, oext, inner, ni, cache, 1);
    if (vec) {
      shape = vec > 1 ? "a thread column per output point, the column in registers, 4 consecutive elements "
                        "per thread where aligned"
                      : "a thread column per output point, 4 consecutive elements per thread where aligned";
    } else if (one && point_lanes(c, k, outer, no, oext, inner, ni)) {
      shape = "a thread per output point (short rows), 4 consecutive points per thread where aligned";
      grid = (oext / 4 + bx - 1) / bx;
    } else {
      col_loop(c, k, outer, no, oext, inner, ni);
    }
  } else if (iext <= GROUP_ROW) {
    /* row groups: group_lanes() lanes per outer point, group_rows() points per block, the row in
       registers (at most ROWCACHE_MAX elements per lane) */
    unsigned w = group_lanes(iext), rows = group_rows(w, oext);
    bx = w * rows;
    grid = (oext + rows - 1) / rows;
    k->block[0] = bx, k->block[1] = 1;
    cu->group = (int)w;
    cu->rowcache = (int)((iext + w - 1) / w);
    int vec = row_vec(c, k, outer, no, oext, inner, ni, ROWCACHE_MAX, 0);
    if (!vec) row_loop(c, k, outer, no, oext, inner, ni);
    shape = cg_fmt(c, "%u lanes per row, %u row%s per block, the row in registers%s", w, rows, rows > 1 ? "s" : "",
                   vec ? ", 4 consecutive elements per lane where aligned" : "");
    cu->group = 0;
  } else {
    /* rows: one block per outer point */
    shape = "a block per row";
    bx = row_threads(iext);
    grid = oext;
    k->block[0] = bx, k->block[1] = 1;
    int64_t per = (iext + bx - 1) / bx, cache = ROWCACHE_MAX;
    /* rows longer than ROWCACHE_LEN, read from one tensor, are read again
       (from L2) by each stage instead of kept: their blocks are large (512+
       threads), and the cache's registers leave room for 3 of them per SM;
       a softmax over rows of 4096 comes closer to the copy floor that way.
       Rows of 768 and 1024 lose nothing with the cache, and keep it.
       Inductor's looped reductions read the row again too.  A row made from
       several tensors (a backward's gradient and saved input; a cat of many
       inputs that the kernel does not store first) keeps the cache: each
       stage would read (or compute) all of them again, and that was not
       measured to pay. */
    if (iext > ROWCACHE_LEN &&
        row_roots(c, k, REREAD_ROOTS) <= REREAD_ROOTS)
      cache = 0;
    if (per <= cache) cu->rowcache = (int)per, shape = "a block per row, the row in registers";
    int vec = row_vec(c, k, outer, no, oext, inner, ni, cache, 0);
    if (vec) shape = vec > 1 ? "a block per row, the row in registers, 4 consecutive elements per thread where aligned"
                             : "a block per row, 4 consecutive elements per thread where aligned";
    else row_loop(c, k, outer, no, oext, inner, ni);
  }
  if (grid < 1) grid = 1;
  if (grid > MAX_GRID) grid = MAX_GRID;
  k->grid[0] = empty ? 0 : (unsigned)grid, k->grid[1] = k->grid[2] = 1;
  k->block[0] = bx, k->block[1] = by, k->block[2] = 1;
  L->shape = shape, L->bx = bx, L->by = by, L->empty = empty;
  L->nbodies = cu->nbodies ? cu->nbodies : 1;
  memcpy(L->body, cu->body, sizeof L->body);
  cu->rowcache = 0;
  cu->decls = NULL;
  cu->ebody = cu->edecls = NULL;
}

/* Entry point i of kernel k (of its unaligned variant where u), for the text. */
static const char *entry_name(Cg *c, const Kernel *k, int u, int i) {
  char name[48];
  em_entry_name(name, sizeof name, k->id, u, i);
  return cg_fmt(c, "%s", name);
}

/* Where the launch runs body i of L's (the call's length cu->iext against
   the bodies' thresholds), as " where s1 <= 2048". */
static const char *body_where(Cg *c, const Launch *L, int i) {
  const char *n = cs(c)->iext;
  if (i + 1 < L->nbodies) return cg_fmt(c, " where %s <= %lld", n, (long long)L->body[i + 1].over);
  return cg_fmt(c, " where %s > %lld", n, (long long)L->body[i].over);
}

/* One generation of k as its entry points into out, one per body
   (bodies b[i] with declarations d[i]), of the kernel or its unaligned
   variant (u); a kernel of one body is one function bounded by `bounds`,
   one of several gets a comment per entry saying which body it is. */
static void cuda_entries(Cg *c, const Kernel *k, Str *out, const Launch *L, const char *bounds, const char *sig,
                         const Str *b, const Str *d, int u, int empty) {
  const Graph *g = c->g;
  const char *it = cs(c)->wide || u == EM_WIDE ? "int64_t" : "int";  /* a symbolic graph's index type */
  for (int i = 0; i < L->nbodies; i++) {
    const Body *e = &L->body[i];
    const char *name = entry_name(c, k, u, i), *eb = bounds;
    if (L->nbodies > 1) {
      str_printf(out, "/* %s%s: %s */\n", name, body_where(c, L, i), e->what);
      eb = e->blocks ? cg_fmt(c, "%u, %d", e->threads, e->blocks) : cg_fmt(c, "%u", e->threads);
    }
    str_printf(out, "extern \"C\" __global__ void __launch_bounds__(%s) %s(%s) {\n", eb, name, sig);
    for (int j = 0; g->symbolic && j < g->syms.n; j++) str_printf(out, "  const %s s%d = (%s)s%d_arg;\n", it, j, it, j);
    if (!empty) str_puts(out, d[i].s ? d[i].s : "");
    if (!empty) str_puts(out, b[i].s ? b[i].s : "");
    str_puts(out, "}\n");
  }
}

static void strs_free(Str *s, int n) {
  for (int i = 0; i < n; i++) str_free(&s[i]);
}

static int strs_oom(const Str *s, int n) {
  int oom = 0;
  for (int i = 0; i < n; i++) oom |= s[i].oom;
  return oom;
}

/* The largest index a symbolic kernel makes at the call's sizes, bounded:
   the points of its space, the elements from each parameter's pointer to
   its last one, the sizes it takes as numbers (c->numbers). */
static Expr *index_bound(Cg *c, const Kernel *k) {
  ExprCtx *x = &c->x;
  Expr *w = ex_const(x, 1);
  for (int d = 0; d < k->ndim; d++) w = ex_mul_e(x, w, k->ssize[d]);
  for (int i = 0; i < k->nparams; i++) {
    const Value *v = c->g->values[k->params[i]];
    Expr *span = ex_add(x, v->soffset, ex_const(x, 1));
    for (int d = 0; d < v->ndim; d++)
      span = ex_add(x, span, ex_mul_e(x, ex_add(x, v->ssize[d], ex_const(x, -1)), v->sstride[d]));
    w = ex_max_e(x, w, span);
  }
  return c->numbers ? ex_max_e(x, w, c->numbers) : w;
}

/* A kernel: its body generated with the scalar fallback of its vector
   paths; where the launch can check the pointers instead (split below), the
   kernel is the aligned variant, generated again with the vector paths
   alone, and the first generation becomes its unaligned variant (alt).  A
   kernel of several bodies (sym_entry) has an entry point per body in
   each.  A symbolic graph's kernel indexes with 32-bit ints, and where
   its indices may pass them at some sizes, its wide variant, generated
   as the first generation is with 64-bit indices, goes in alt too
   (Kernel.swide); one whose indices pass them at every size, or which
   checks gathered indices (its variants would not share its record), is
   generated again with 64-bit indices itself. */
static void cuda_kernel(Cg *c, Kernel *k, Str *out, Str *alt, uint32_t merge) {
  CudaCg *cu = cs(c);
  Graph *g = c->g;
  Str body[MAX_BODIES] = {{0}}, decls[MAX_BODIES] = {{0}};
  Launch L;
  k->align = NULL, k->nalign = 0;
  k->swide = NULL;
  cu->aligned_only = 0;
  cuda_body(c, k, merge, body, decls, &L);
  int empty = L.empty, nb = L.nbodies;
  unsigned bx = L.bx, by = L.by;
  /* the launch's choice of body and the most threads each takes (run.c) */
  k->nbodies = nb;
  for (int i = 0; i < MAX_BODIES; i++) k->bblock[i] = nb > 1 && i < nb ? L.body[i].threads / by : i ? 0 : bx;
  /* the signature: the pointers this kernel uses, in the order the body
     first uses them (p0, p1, ...: the launch passes k->params in order) */
  k->params = pool_alloc(c->pool, sizeof(int) * (size_t)(c->nslot + 1));
  if (!k->params) c->oom = 1;
  k->nparams = k->params ? cg_params(c, k->params) : 0;
  if (g->symbolic && !cu->wide && !c->oom) {
    Expr *w = index_bound(c, k);
    if (k->index_checks || (w->kind == E_CONST && w->c >= EM_INDEX32_LIM)) {
      strs_free(body, MAX_BODIES), strs_free(decls, MAX_BODIES);
      cu->wide = 1;
      cuda_kernel(c, k, out, alt, merge);
      cu->wide = 0;
      return;
    }
    if (w->kind != E_CONST) k->swide = w;
  }
  str_printf(out, "\n/* kernel %d: space [", k->id);
  for (int d = 0; d < k->ndim; d++) {
    if (k->symbolic) str_puts(out, d ? ", " : ""), ex_print(out, k->ssize[d], NULL);
    else str_printf(out, "%s%lld", d ? ", " : "", (long long)k->size[d]);
  }
  if (k->sgrid) {
    str_printf(out, "], %s; grid ", L.shape);
    ex_print(out, k->sgrid, NULL);
    if (k->sblock) {  /* the launch's at the call's sizes, at most bx */
      str_puts(out, ", block (");
      ex_print(out, k->sblock, NULL);
      str_printf(out, ")x%u; computes", by);
    } else {
      str_printf(out, ", block %ux%u; computes", bx, by);
    }
  } else {
    str_printf(out, "], %s; grid %u, block %ux%u; computes", L.shape, k->grid[0], bx, by);
  }
  for (int i = 0; i < k->nitems; i++) str_printf(out, " %s", g->values[k->items[i].v]->def->name);
  char bounds[64];
  snprintf(bounds, sizeof bounds, "%u", bx * by);  /* several bodies: each its own (Body) */
  Str sig = {0};
  for (int i = 0; i < k->nparams; i++) {
    int v = k->params[i];
    const char *ct = cg_storage_ctype(g->values[v]->dtype);
    str_printf(&sig, "%s%s%s *%sp%d", i ? ", " : "", c->used[v] & 2 ? "" : "const ", ct,
               k->into ? "" : "__restrict__ ", i);  /* copy_ into an input: reads what it writes */
  }
  /* a symbolic graph's kernels take the call's size variables after the pointers (run.c), as
     64-bit integers that each entry point makes its index type (cuda_entries) */
  for (int i = 0; g->symbolic && i < g->syms.n; i++)
    str_printf(&sig, "%sconst int64_t s%d_arg", sig.len ? ", " : "", i);
  /* The unaligned path as a variant of its own: this text keeps the aligned path alone and the
     launch checks the pointers (run.c).  NVRTC then compiles about a third
     less for a graph of hundreds of kernels.  Not where an
     access's constant offset already says it is unaligned (a view at an
     odd offset inside the graph: the variant would be the one run), nor in
     a kernel that checks indices (whose record is in the graph's first module). */
  int split = !empty && cu->has_alt && !strs_oom(body, nb) && !k->index_checks && cu->nvchk > 0;
  for (int i = 0; split && i < cu->nvchk; i++) split = cu->vchk[i].off % cu->vchk[i].mod == 0;
  if (split) {
    k->align = pool_alloc(c->pool, sizeof(AlignCheck) * (size_t)cu->nvchk);
    if (!k->align) c->oom = 1, split = 0;
  }
  if (split) {
    memcpy(k->align, cu->vchk, sizeof(AlignCheck) * (size_t)cu->nvchk);
    k->nalign = cu->nvchk;
  }
  /* the sizes the vector paths take 4 to divide: the launch checks them with the pointers */
  k->svec = NULL;
  const char *vdiv = vdiv_list(c);
  for (int i = 0; split && i < cu->nvdiv; i++) {
    Expr *m = ex_mod(&c->x, cu->vdiv[i], 4);
    k->svec = k->svec ? ex_add(&c->x, k->svec, m) : m;
  }
  /* the aligned variant, where this is the final generation (a trial of
     loop merges is measured by the first one alone: its divmods stay) */
  Str abody[MAX_BODIES] = {{0}}, adecls[MAX_BODIES] = {{0}}, ubody[MAX_BODIES] = {{0}}, udecls[MAX_BODIES] = {{0}};
  if (split && alt) {
    long divmods = c->divmods;
    cu->aligned_only = 1;
    cuda_body(c, k, merge, abody, adecls, &L);
    cu->aligned_only = 0;
    EM_ASSERT(L.nbodies == nb);
    /* where the sizes choose the unaligned variant (sizes 4 does not divide: common, not a rare
       pointer), it is the kernel's scalar paths alone, as they would be without vector paths:
       the launch runs it only where the vector paths' test would fail */
    if (*vdiv) {
      Launch U;
      cu->no_vec = 1;
      cuda_body(c, k, merge, ubody, udecls, &U);
      cu->no_vec = 0;
      EM_ASSERT(U.nbodies == nb);
      /* its parameters must be the kernel's, in order (they are named by first use) */
      int *params = pool_alloc(c->pool, sizeof(int) * (size_t)(c->nslot + 1));
      if (!params || cg_params(c, params) != k->nparams || memcmp(params, k->params, sizeof(int) * (size_t)k->nparams))
        strs_free(ubody, MAX_BODIES), strs_free(udecls, MAX_BODIES);
    }
    c->divmods = divmods;
  }
  /* the wide variant: the first generation's flags, so its parameters are the kernel's */
  Str wbody[MAX_BODIES] = {{0}}, wdecls[MAX_BODIES] = {{0}};
  Launch W = {0};
  if (k->swide && alt) {
    long divmods = c->divmods;
    cu->wide = 1;
    cuda_body(c, k, merge, wbody, wdecls, &W);
    cu->wide = 0;
    int *params = pool_alloc(c->pool, sizeof(int) * (size_t)(c->nslot + 1));
    int np = params ? cg_params(c, params) : -1;
    if (!params) c->oom = 1;
    EM_ASSERT(c->oom || (W.nbodies == nb && np == k->nparams &&
                         !memcmp(params, k->params, sizeof(int) * (size_t)k->nparams)));
    c->divmods = divmods;
  }
  if (nb > 1) {  /* the body the launch runs at the call's sizes (run.c, Kernel.sbody) */
    str_puts(out, "; the launch runs");
    for (int i = 0; i < nb; i++)
      str_printf(out, "%s %s%s", i ? "," : "", entry_name(c, k, 0, i), body_where(c, &L, i));
  }
  if (split && *vdiv)  /* the choice the launch makes per call (run.c) */
    str_printf(out, "; the launch runs ember_k%d_u where a pointer is not aligned or 4 does not divide %s", k->id,
               vdiv);
  for (int i = 1; split && *vdiv && i < nb; i++)  /* ... with an entry point per body too */
    str_printf(out, "%s%s%s", i > 1 ? ", " : " (", entry_name(c, k, 1, i),
               i + 1 < nb ? "" : " for the other bodies)");
  if (k->swide && alt) {
    str_printf(out, "; it runs ember_k%d_w, its indices 64-bit, where ", k->id);
    ex_print(out, k->swide, NULL);
    str_printf(out, " >= %lld at the call's sizes", (long long)EM_INDEX32_LIM);
  }
  str_puts(out, " */\n");
  /* the values the parameters are, for the reader (the key leaves comments out) */
  for (int i = 0; i < k->nparams; i++) str_printf(out, "%sp%d = b%d", i ? ", " : "/* parameters: ", i, k->params[i]);
  if (k->nparams) str_puts(out, " */\n");
  const char *sg = sig.s ? sig.s : "";
  cuda_entries(c, k, out, &L, bounds, sg, split && alt ? abody : body, split && alt ? adecls : decls, 0, empty);
  if (split && alt && *vdiv && ubody[0].s) {
    str_printf(alt, "\n/* kernel %d with its scalar paths alone, for a launch where a vector access's pointer is "
               "not aligned or 4 does not divide %s */\n", k->id, vdiv);
    cuda_entries(c, k, alt, &L, bounds, sg, ubody, udecls, 1, 0);
  } else if (split && alt) {
    str_printf(alt, "\n/* kernel %d with its unaligned path, for a launch where a vector access's pointer is "
               "not aligned */\n", k->id);
    cuda_entries(c, k, alt, &L, bounds, sg, body, decls, 1, 0);
  }
  if (k->swide && alt) {
    str_printf(alt, "\n/* kernel %d with 64-bit indices, for a launch where an index passes 32 bits */\n", k->id);
    cuda_entries(c, k, alt, &W, bounds, sg, wbody, wdecls, EM_WIDE, empty);
  }
  if (strs_oom(body, nb) || strs_oom(decls, nb) || sig.oom || strs_oom(abody, nb) || strs_oom(adecls, nb) ||
      strs_oom(ubody, nb) || strs_oom(udecls, nb) || strs_oom(wbody, nb) || strs_oom(wdecls, nb))
    c->oom = 1;
  strs_free(wbody, MAX_BODIES), strs_free(wdecls, MAX_BODIES);
  strs_free(abody, MAX_BODIES), strs_free(adecls, MAX_BODIES), strs_free(ubody, MAX_BODIES);
  strs_free(udecls, MAX_BODIES);
  str_free(&sig);
  strs_free(body, MAX_BODIES);
  strs_free(decls, MAX_BODIES);
}

const Target target_cuda = {
  .name = "cuda",
  .prelude = cuda_prelude_text,
  .state_new = cuda_state_new,
  .state_free = cuda_state_free,
  .kernel = cuda_kernel,
  .load = cg_cuda_load,
  .store = cg_cuda_store,
  .red_combine = cuda_red_combine,
  .lane = cuda_lane,
  .cat_lanes = cuda_cat_lanes,
  .def_find = cuda_def_find,
  .def_keep = cuda_def_keep,
  .set_lane = lane_subs,
  .eager_gpu = 1,
};
