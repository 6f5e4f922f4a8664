/*
 * options.c - the options table (options.def) at work: defaults, parsing
 * and checking a value, the environment (EMBER_<NAME> for the user options),
 * and the public ember_options_* calls.
 *
 * An ember_options object owns its strings (malloc).  ember_compile copies
 * the struct into the graph with the strings in the graph's pool
 * (em_options_copy), so passes read g->opt and nothing reads the
 * environment after the client asked for it once.  This file does not
 * decide what an option means: the code that reads the field does.
 */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ember_int.h"

enum { OT_BOOL, OT_INT, OT_STR, OT_CHOICE };
enum { OW_USER, OW_HOST, OW_TEST };

typedef struct OptInfo {
  const char *name;
  int type;             /* OT_* */
  const char *dflt;     /* as text, parsed like any value */
  int64_t lo, hi;       /* INT's range */
  const char *choices;  /* CHOICE's '|'-separated names */
  int who;              /* OW_* */
  const char *doc;
  size_t off;           /* the field in EmOptions */
} OptInfo;

static const OptInfo table[] = {
#define OPT(name, type, dflt, lo, hi, choices, who, doc) \
  {#name, OT_##type, dflt, lo, hi, choices, OW_##who, doc, offsetof(EmOptions, name)},
#include "options.def"
#undef OPT
};
enum { NOPTS = sizeof table / sizeof table[0] };

static const char *const type_names[] = {"bool", "int", "str", "choice"};
static const char *const who_names[] = {"user", "host", "test"};

struct ember_options {
  EmOptions v;
  char err[512];
};

static const OptInfo *find(const char *name) {
  for (int i = 0; name && i < NOPTS; i++)
    if (!strcmp(table[i].name, name)) return &table[i];
  return NULL;
}

/* The index of `s` among a CHOICE's names, or -1. */
static int choice_index(const char *choices, const char *s) {
  size_t n = strlen(s);
  int i = 0;
  for (const char *p = choices; *p; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, s, n)) return i;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "on", "yes"}, *const no[] = {"0", "false", "off", "no"};
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) return *out = 1, 0;
    if (!strcasecmp(s, no[i])) return *out = 0, 0;
  }
  return -1;
}

/* Parse `s` into option `o`'s field of v; on a bad value, a message naming
   the option (as `what`: its key or its environment variable) and what it takes. */
static int set_value(EmOptions *v, const OptInfo *o, const char *s, const char *what, char *err, size_t errlen) {
  char *field = (char *)v + o->off;
  switch (o->type) {
  case OT_BOOL: {
    int b;
    if (parse_bool(s, &b)) break;
    memcpy(field, &b, sizeof b);
    return EMBER_OK;
  }
  case OT_INT: {
    char *end;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || x < o->lo || x > o->hi) {
      snprintf(err, errlen, "ember: option %s must be an integer from %lld to %lld, not '%s'", what,
               (long long)o->lo, (long long)o->hi, s);
      return EMBER_EINVAL;
    }
    int64_t i = x;
    memcpy(field, &i, sizeof i);
    return EMBER_OK;
  }
  case OT_STR: {
    char *old, *copy = strdup(s);
    if (!copy) return snprintf(err, errlen, "ember: out of memory setting option %s", what), EMBER_ENOMEM;
    memcpy(&old, field, sizeof old);
    free(old);
    memcpy(field, &copy, sizeof copy);
    return EMBER_OK;
  }
  case OT_CHOICE: {
    int c = choice_index(o->choices, s);
    if (c < 0) {
      snprintf(err, errlen, "ember: option %s must be one of %s, not '%s'", what, o->choices, s);
      return EMBER_EINVAL;
    }
    memcpy(field, &c, sizeof c);
    return EMBER_OK;
  }
  }
  snprintf(err, errlen, "ember: option %s must be one of 1/0, true/false, on/off, yes/no, not '%s'", what, s);
  return EMBER_EINVAL;
}

static void free_strings(EmOptions *v) {
  for (int i = 0; i < NOPTS; i++) {
    if (table[i].type != OT_STR) continue;
    char *s;
    memcpy(&s, (char *)v + table[i].off, sizeof s);
    free(s);
  }
}

ember_options *ember_options_new(void) {
  ember_options *o = em_malloc(sizeof *o);
  if (!o) return NULL;
  memset(o, 0, sizeof *o);
  for (int i = 0; i < NOPTS; i++) {
    if (set_value(&o->v, &table[i], table[i].dflt, table[i].name, o->err, sizeof o->err)) {
      ember_options_free(o);  /* out of memory; a bad default is caught by the C tests */
      return NULL;
    }
  }
  return o;
}

void ember_options_free(ember_options *o) {
  if (!o) return;
  free_strings(&o->v);
  free(o);
}

const char *ember_options_error(const ember_options *o) { return o ? o->err : "ember: no options"; }

int ember_options_set(ember_options *o, const char *name, const char *value) {
  if (!o || !name || !value) return EMBER_EINVAL;
  const OptInfo *oi = find(name);
  if (!oi) {
    int w = snprintf(o->err, sizeof o->err, "ember: unknown option '%s'; the options are:", name);
    for (int i = 0; i < NOPTS && w > 0 && (size_t)w < sizeof o->err; i++)
      if (table[i].who == OW_USER) w += snprintf(o->err + w, sizeof o->err - (size_t)w, " %s", table[i].name);
    return EMBER_EINVAL;
  }
  return set_value(&o->v, oi, value, name, o->err, sizeof o->err);
}

int ember_options_read_env(ember_options *o) {
  if (!o) return EMBER_EINVAL;
  for (int i = 0; i < NOPTS; i++) {
    if (table[i].who != OW_USER) continue;
    char var[64] = "EMBER_";
    size_t n = strlen(var);
    for (const char *p = table[i].name; *p && n + 1 < sizeof var; p++) var[n++] = (char)toupper((unsigned char)*p);
    var[n] = 0;
    const char *e = getenv(var);
    if (!e || !*e) continue;
    int rc = set_value(&o->v, &table[i], e, var, o->err, sizeof o->err);
    if (rc) return rc;
  }
  return EMBER_OK;
}

int ember_options_get(const ember_options *o, const char *name, char *buf, size_t n) {
  const OptInfo *oi = find(name);
  if (!o || !oi || !buf || !n) return EMBER_EINVAL;
  const char *field = (const char *)&o->v + oi->off;
  switch (oi->type) {
  case OT_BOOL: case OT_CHOICE: {
    int x;
    memcpy(&x, field, sizeof x);
    if (oi->type == OT_BOOL) {
      snprintf(buf, n, "%d", x);
      break;
    }
    const char *p = oi->choices;
    for (int i = 0; i < x && p; i++) p = strchr(p, '|'), p = p ? p + 1 : NULL;
    const char *bar = p ? strchr(p, '|') : NULL;
    snprintf(buf, n, "%.*s", p ? (int)(bar ? (size_t)(bar - p) : strlen(p)) : 0, p ? p : "");
    break;
  }
  case OT_INT: {
    int64_t x;
    memcpy(&x, field, sizeof x);
    snprintf(buf, n, "%lld", (long long)x);
    break;
  }
  case OT_STR: {
    const char *s;
    memcpy(&s, field, sizeof s);
    snprintf(buf, n, "%s", s ? s : "");
    break;
  }
  }
  return EMBER_OK;
}

int ember_option_count(void) { return NOPTS; }

int ember_option_describe(int i, ember_option_info *info) {
  if (i < 0 || i >= NOPTS || !info) return EMBER_EINVAL;
  const OptInfo *o = &table[i];
  info->name = o->name;
  info->type = type_names[o->type];
  info->dflt = o->dflt;
  info->choices = o->choices;
  info->who = who_names[o->who];
  info->doc = o->doc;
  info->lo = o->lo, info->hi = o->hi;
  return EMBER_OK;
}

const EmOptions *em_options_of(const ember_options *o) { return o ? &o->v : NULL; }

int em_options_copy(EmOptions *dst, const EmOptions *src, Pool *pool) {
  *dst = *src;
  for (int i = 0; i < NOPTS; i++) {
    if (table[i].type != OT_STR) continue;
    char *s, *copy;
    memcpy(&s, (char *)dst + table[i].off, sizeof s);
    copy = pool_strdup(pool, s ? s : "");
    if (!copy) return EMBER_ENOMEM;
    memcpy((char *)dst + table[i].off, &copy, sizeof copy);
  }
  return EMBER_OK;
}

int em_compile_threads(const EmOptions *o) {
  int64_t n = o ? o->compile_threads : 0;
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > EM_MAX_THREADS ? EM_MAX_THREADS : (int)n;
}
