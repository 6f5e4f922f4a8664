/*
 * ops.c - the op table (ops.def) as data: each op's ATen name, form and
 * spelling, and the lookup of an ATen name, which the graph builder does for
 * every node it is handed.  What an op means is lower.c's; this file only
 * finds it.
 */
#include <pthread.h>
#include <string.h>

#include "ember_int.h"

const OpInfo em_ops[OP_COUNT] = {
#define OP(e, name, form, spell) {name, form, spell},
#include "ops.def"
#undef OP
};

/* An open-addressing table of the names, built once (threads may build
   graphs at once). */
enum { TAB = 1024 };
static short table[TAB];
static pthread_once_t built = PTHREAD_ONCE_INIT;
_Static_assert(OP_COUNT < TAB / 2, "op table too small");

static void build_table(void) {
  for (int i = 0; i < TAB; i++) table[i] = -1;
  for (int op = 0; op < OP_COUNT; op++) {
    uint64_t h = em_hash64(em_ops[op].name, strlen(em_ops[op].name), 0) % TAB;
    while (table[h] >= 0) h = (h + 1) % TAB;
    table[h] = (short)op;
  }
}

int em_op_lookup(const char *name) {
  pthread_once(&built, build_table);
  uint64_t h = em_hash64(name, strlen(name), 0) % TAB;
  while (table[h] >= 0) {
    if (!strcmp(em_ops[table[h]].name, name)) return table[h];
    h = (h + 1) % TAB;
  }
  return OP_FALLBACK;
}
