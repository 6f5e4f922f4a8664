/*
 * _ext.c - the CPython binding of ember's C core: two types, Graph (the
 * builder) and Program (a compiled graph), written only on the public API in
 * include/ember.h.  Errors from the core become ember.EmberError with the
 * core's message (EmberIndexError, an IndexError too, for an index out of
 * range; both classes are ember/errors.py's, also reachable as
 * ember._ext.EmberError); nothing here decides anything about compilation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember.h"

static PyObject *EmberError;
static PyObject *EmberIndexError;  /* EmberError and IndexError: a kernel met an index out of range */

/* ------------------------------------------------------------------ Graph */
typedef struct {
  PyObject_HEAD
  ember_graph *g;          /* NULL once compiled (the program owns it) */
} GraphObject;

typedef struct {
  PyObject_HEAD
  ember_program *p;
  int nvalues;
} ProgramObject;

static PyTypeObject GraphType, ProgramType;

/* Raises EmberError with a message from the C core.  Compiler output in it
   may be cut inside a UTF-8 sequence, or be in another encoding: decode
   with replacement rather than fail on it. */
static void set_error_of(PyObject *type, const char *msg) {
  PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
  if (!m) return;
  PyErr_SetObject(type, m);
  Py_DECREF(m);
}
static void set_error(const char *msg) { set_error_of(EmberError, msg); }

static int check_graph(GraphObject *self) {
  if (!self->g) {
    PyErr_SetString(EmberError, "ember: this graph was already compiled");
    return 0;
  }
  return 1;
}

static PyObject *raise_graph(GraphObject *self) {
  set_error(ember_graph_error(self->g));
  return NULL;
}

static int read_ints(PyObject *seq, int64_t *out, int max, int *n, const char *what) {
  PyObject *fast = PySequence_Fast(seq, what);
  if (!fast) return 0;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  if (len > max) {
    Py_DECREF(fast);
    PyErr_Format(EmberError, "ember: %s has %zd entries, at most %d allowed", what, len, max);
    return 0;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return 0; }
    out[i] = v;
  }
  *n = (int)len;
  Py_DECREF(fast);
  return 1;
}

static PyObject *Graph_value(GraphObject *self, PyObject *args) {
  int dtype, device;
  PyObject *sizes, *strides;
  long long offset;
  if (!check_graph(self)) return NULL;
  if (!PyArg_ParseTuple(args, "iiOOL", &dtype, &device, &sizes, &strides, &offset)) return NULL;
  int64_t sz[EMBER_MAX_DIMS], st[EMBER_MAX_DIMS];
  int n1 = 0, n2 = 0;
  if (!read_ints(sizes, sz, EMBER_MAX_DIMS, &n1, "sizes")) return NULL;
  if (!read_ints(strides, st, EMBER_MAX_DIMS, &n2, "strides")) return NULL;
  if (n1 != n2) return PyErr_Format(EmberError, "ember: value has %d sizes but %d strides", n1, n2);
  int v = ember_graph_value(self->g, dtype, device, n1, sz, st, offset);
  if (v < 0) return raise_graph(self);
  return PyLong_FromLong(v);
}

/* Dynamic shapes: size variables and size expressions by handle (ember.h). */
static PyObject *Graph_sym(GraphObject *self, PyObject *args) {
  const char *name;
  long long lo, hi;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "sLL", &name, &lo, &hi)) return NULL;
  int h = ember_graph_sym(self->g, name, lo, hi);
  return h < 0 ? raise_graph(self) : PyLong_FromLong(h);
}

static PyObject *Graph_size_const(GraphObject *self, PyObject *args) {
  long long c;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "L", &c)) return NULL;
  int h = ember_graph_size_const(self->g, c);
  return h < 0 ? raise_graph(self) : PyLong_FromLong(h);
}

static PyObject *Graph_size_op(GraphObject *self, PyObject *args) {
  int op, a, b;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "iii", &op, &a, &b)) return NULL;
  int h = ember_graph_size_op(self->g, op, a, b);
  return h < 0 ? raise_graph(self) : PyLong_FromLong(h);
}

static PyObject *Graph_sym_from_input(GraphObject *self, PyObject *args) {
  int sym, input, dim;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "iii", &sym, &input, &dim)) return NULL;
  if (ember_graph_sym_from_input(self->g, sym, input, dim) < 0) return raise_graph(self);
  Py_RETURN_NONE;
}

static PyObject *Graph_value_sym(GraphObject *self, PyObject *args) {
  int dtype, device, offset;
  PyObject *sizes, *strides;
  if (!check_graph(self)) return NULL;
  if (!PyArg_ParseTuple(args, "iiOOi", &dtype, &device, &sizes, &strides, &offset)) return NULL;
  int64_t sz[EMBER_MAX_DIMS], st[EMBER_MAX_DIMS];
  int n1 = 0, n2 = 0, isz[EMBER_MAX_DIMS], ist[EMBER_MAX_DIMS];
  if (!read_ints(sizes, sz, EMBER_MAX_DIMS, &n1, "sizes")) return NULL;
  if (!read_ints(strides, st, EMBER_MAX_DIMS, &n2, "strides")) return NULL;
  if (n1 != n2) return PyErr_Format(EmberError, "ember: value has %d sizes but %d strides", n1, n2);
  for (int d = 0; d < n1; d++) {
    if (sz[d] < 0 || sz[d] > 0x7fffffff || st[d] < 0 || st[d] > 0x7fffffff)
      return PyErr_Format(EmberError, "ember: value: bad size handle in dim %d", d);
    isz[d] = (int)sz[d], ist[d] = (int)st[d];
  }
  int v = ember_graph_value_sym(self->g, dtype, device, n1, isz, ist, offset);
  if (v < 0) return raise_graph(self);
  return PyLong_FromLong(v);
}

static PyObject *Graph_is_symbolic(GraphObject *self, PyObject *noargs) {
  if (!check_graph(self)) return NULL;
  return PyBool_FromLong(ember_graph_is_symbolic(self->g));
}

static PyObject *Graph_input(GraphObject *self, PyObject *args) {
  int v;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "i", &v)) return NULL;
  if (ember_graph_input(self->g, v) < 0) return raise_graph(self);
  Py_RETURN_NONE;
}

/* Fill one ember_arg from a Python object; lists go into `store`, kept until the node is added. */
typedef struct { int64_t *bufs[64]; int n; } ArgStore;

static int fill_arg(PyObject *o, ember_arg *a, ArgStore *store, int depth) {
  memset(a, 0, sizeof *a);
  if (o == Py_None) { a->kind = EMBER_ARG_NONE; return 1; }
  if (PyBool_Check(o)) { a->kind = EMBER_ARG_BOOL; a->i = o == Py_True; return 1; }
  if (PyLong_Check(o)) {
    a->kind = EMBER_ARG_INT;
    a->i = PyLong_AsLongLong(o);
    if (a->i == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      a->kind = EMBER_ARG_OTHER;  /* an int too large: only a fallback can take it */
    }
    return 1;
  }
  if (PyFloat_Check(o)) { a->kind = EMBER_ARG_FLOAT; a->f = PyFloat_AsDouble(o); return 1; }
  if (PyUnicode_Check(o)) {
    a->kind = EMBER_ARG_STRING;
    a->s = PyUnicode_AsUTF8(o);
    return a->s != NULL;
  }
  if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) >= 2 && PyUnicode_Check(PyTuple_GET_ITEM(o, 0))) {
    const char *tag = PyUnicode_AsUTF8(PyTuple_GET_ITEM(o, 0));
    PyObject *val = PyTuple_GET_ITEM(o, 1);
    if (!strcmp(tag, "kw") && PyTuple_GET_SIZE(o) == 3 && depth == 0) {
      if (!PyUnicode_Check(val)) { PyErr_SetString(EmberError, "ember: keyword name must be a str"); return 0; }
      if (!fill_arg(PyTuple_GET_ITEM(o, 2), a, store, 1)) return 0;
      a->name = PyUnicode_AsUTF8(val);
      return a->name != NULL;
    }
    if (!strcmp(tag, "tensor")) {
      a->kind = EMBER_ARG_TENSOR;
      a->i = PyLong_AsLongLong(val);
      return !(a->i == -1 && PyErr_Occurred());
    }
    if (!strcmp(tag, "dtype")) {
      a->kind = EMBER_ARG_DTYPE;
      a->i = PyLong_AsLongLong(val);
      return !(a->i == -1 && PyErr_Occurred());
    }
    if (!strcmp(tag, "size")) {
      a->kind = EMBER_ARG_SIZE;
      a->i = PyLong_AsLongLong(val);
      return !(a->i == -1 && PyErr_Occurred());
    }
    if (!strcmp(tag, "ints") || !strcmp(tag, "tensors") || !strcmp(tag, "sizes")) {
      if (store->n >= 64) { PyErr_SetString(EmberError, "ember: too many list arguments"); return 0; }
      Py_ssize_t len = PySequence_Size(val);
      if (len < 0) return 0;
      int64_t *buf = malloc(sizeof(int64_t) * (len + 1));
      if (!buf) { PyErr_NoMemory(); return 0; }
      store->bufs[store->n++] = buf;
      int n = 0;
      if (!read_ints(val, buf, (int)len, &n, tag)) return 0;
      a->kind = !strcmp(tag, "ints") ? EMBER_ARG_INTS : !strcmp(tag, "sizes") ? EMBER_ARG_SIZES : EMBER_ARG_TENSORS;
      a->list = buf, a->n = n;
      return 1;
    }
    if (!strcmp(tag, "other")) { a->kind = EMBER_ARG_OTHER; return 1; }
  }
  a->kind = EMBER_ARG_OTHER;  /* anything else: the node can only fall back */
  return 1;
}

static PyObject *Graph_node(GraphObject *self, PyObject *args) {
  const char *op, *name;
  PyObject *pargs, *pouts;
  if (!check_graph(self)) return NULL;
  if (!PyArg_ParseTuple(args, "ssOO", &op, &name, &pargs, &pouts)) return NULL;
  PyObject *fa = PySequence_Fast(pargs, "args must be a sequence");
  if (!fa) return NULL;
  Py_ssize_t na = PySequence_Fast_GET_SIZE(fa);
  if (na > 64) {
    Py_DECREF(fa);
    return PyErr_Format(EmberError, "ember: %s (node %s): too many arguments", op, name);
  }
  ember_arg a[64];
  ArgStore store = {{0}, 0};
  PyObject *result = NULL;
  int64_t outs64[64];
  int outs[64], nouts = 0;
  for (Py_ssize_t i = 0; i < na; i++)
    if (!fill_arg(PySequence_Fast_GET_ITEM(fa, i), &a[i], &store, 0)) goto done;
  if (!read_ints(pouts, outs64, 64, &nouts, "outs")) goto done;
  for (int i = 0; i < nouts; i++) {
    if (outs64[i] < -1 || outs64[i] > 0x7fffffff) {
      PyErr_Format(EmberError, "ember: %s (node %s): bad output id", op, name);
      goto done;
    }
    outs[i] = (int)outs64[i];
  }
  int id = ember_graph_node(self->g, op, name, (int)na, a, nouts, outs);
  if (id < 0) raise_graph(self);
  else result = PyLong_FromLong(id);
done:
  for (int i = 0; i < store.n; i++) free(store.bufs[i]);
  Py_DECREF(fa);
  return result;
}

static PyObject *Graph_noalias(GraphObject *self, PyObject *args) {
  int node;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "i", &node)) return NULL;
  if (ember_graph_node_noalias(self->g, node) < 0) return raise_graph(self);
  Py_RETURN_NONE;
}

static PyObject *Graph_outputs(GraphObject *self, PyObject *args) {
  PyObject *seq;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "O", &seq)) return NULL;
  Py_ssize_t len = PySequence_Size(seq);
  if (len < 0) return NULL;
  int64_t *b = malloc(sizeof(int64_t) * (len + 1));
  int *o = malloc(sizeof(int) * (len + 1));
  int n = 0;
  PyObject *r = NULL;
  if (!b || !o) { PyErr_NoMemory(); goto done; }
  if (!read_ints(seq, b, (int)len, &n, "outputs")) goto done;
  for (int i = 0; i < n; i++) o[i] = b[i] < -1 || b[i] > 0x7fffffff ? -2 : (int)b[i];
  if (ember_graph_outputs(self->g, n, o) < 0) { raise_graph(self); goto done; }
  r = Py_None;
  Py_INCREF(r);
done:
  free(b), free(o);
  return r;
}

/* An ember_options from a dict of option names and their values as text
   (ember/options.py resolves the user's and the environment's once, and adds
   the client's: the device, the libraries' folders).  NULL with an exception set. */
static ember_options *options_from(PyObject *d, int read_env) {
  ember_options *o = ember_options_new();
  if (!o) return (ember_options *)PyErr_NoMemory();
  if (read_env && ember_options_read_env(o)) goto bad;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (d && PyDict_Next(d, &pos, &k, &v)) {
    const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    const char *val = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
    if (!name || !val) {
      ember_options_free(o);
      PyErr_SetString(PyExc_TypeError, "ember options: names and values must be str");
      return NULL;
    }
    if (ember_options_set(o, name, val)) goto bad;
  }
  return o;
bad:
  PyErr_SetString(PyExc_ValueError, ember_options_error(o));
  ember_options_free(o);
  return NULL;
}

/* The core's interrupt check (ember_set_interrupt_check), called while it
   waits on a compiler with the GIL released: run Python's signal handlers
   (main thread only); one that raises (Ctrl-C's KeyboardInterrupt) stops
   the compile, and its exception is what Graph.compile raises. */
static int check_interrupt(void) {
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return 0;
#else
  if (_Py_IsFinalizing()) return 0;
#endif
  PyGILState_STATE s = PyGILState_Ensure();
  int stop = PyErr_CheckSignals() < 0;
  PyGILState_Release(s);
  return stop;
}


/* A Python Program owning p (freed with it), or NULL with p freed. */
static PyObject *program_object(ember_program *p) {
  ProgramObject *po = PyObject_New(ProgramObject, &ProgramType);
  if (!po) { ember_program_free(p); return NULL; }
  po->p = p;
  po->nvalues = ember_program_num_values(p);
  return (PyObject *)po;
}

static PyObject *Graph_compile(GraphObject *self, PyObject *args) {
  PyObject *opts = NULL;
  if (!check_graph(self) || !PyArg_ParseTuple(args, "|O!", &PyDict_Type, &opts)) return NULL;
  ember_options *o = options_from(opts, 0);
  if (!o) return NULL;
  char err[8192];
  ember_graph *g = self->g;
  self->g = NULL;  /* compile consumes the graph, on success or failure */
  ember_program *p;
  Py_BEGIN_ALLOW_THREADS
  p = ember_compile(g, o, err, sizeof err);
  Py_END_ALLOW_THREADS
  ember_options_free(o);
  if (!p) {
    if (!PyErr_Occurred()) set_error(err);  /* else a signal handler's exception: KeyboardInterrupt */
    return NULL;
  }
  const char *warning = ember_program_warning(p);
  if (warning && PyErr_WarnEx(PyExc_RuntimeWarning, warning, 1) < 0) {
    ember_program_free(p);
    return NULL;
  }
  return program_object(p);
}

static void Graph_dealloc(GraphObject *self) {
  ember_graph_free(self->g);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Graph_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
  GraphObject *self = (GraphObject *)type->tp_alloc(type, 0);
  if (!self) return NULL;
  self->g = ember_graph_new();
  if (!self->g) { Py_DECREF(self); return PyErr_NoMemory(); }
  return (PyObject *)self;
}

static PyMethodDef Graph_methods[] = {
  {"value", (PyCFunction)Graph_value, METH_VARARGS, "value(dtype, device, sizes, strides, offset) -> id"},
  {"sym", (PyCFunction)Graph_sym, METH_VARARGS, "sym(name, lo, hi) -> size handle of a new size variable"},
  {"size_const", (PyCFunction)Graph_size_const, METH_VARARGS, "size_const(c) -> size handle"},
  {"size_op", (PyCFunction)Graph_size_op, METH_VARARGS, "size_op(SIZE_ADD.., a, b) -> size handle"},
  {"sym_from_input", (PyCFunction)Graph_sym_from_input, METH_VARARGS, "sym_from_input(sym, input, dim)"},
  {"value_sym", (PyCFunction)Graph_value_sym, METH_VARARGS,
   "value_sym(dtype, device, size handles, stride handles, offset handle) -> id"},
  {"is_symbolic", (PyCFunction)Graph_is_symbolic, METH_NOARGS, "is_symbolic() -> bool"},
  {"input", (PyCFunction)Graph_input, METH_VARARGS, "input(value_id)"},
  {"node", (PyCFunction)Graph_node, METH_VARARGS, "node(op, name, args, outs) -> id"},
  {"outputs", (PyCFunction)Graph_outputs, METH_VARARGS, "outputs([value ids])"},
  {"noalias", (PyCFunction)Graph_noalias, METH_VARARGS, "noalias(node id): its results alias no argument"},
  {"compile", (PyCFunction)Graph_compile, METH_VARARGS, "compile(options) -> Program"},
  {NULL, NULL, 0, NULL}};

static PyTypeObject GraphType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "ember._ext.Graph",
  .tp_basicsize = sizeof(GraphObject),
  .tp_dealloc = (destructor)Graph_dealloc,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A graph being built for ember's C core.",
  .tp_methods = Graph_methods,
  .tp_new = Graph_new,
};

/* ---------------------------------------------------------------- Program */
static PyObject *ints_tuple(const int64_t *v, int n) {
  PyObject *t = PyTuple_New(n);
  if (!t) return NULL;
  for (int i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(v[i]));
  return t;
}

/* The program's report (include/ember.h, ember_report) as a dict. */
static PyObject *report_dict(ember_program *p) {
  ember_report r;
  ember_program_report(p, &r);
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:d,s:d,s:i,s:d,s:d,s:d,s:d,s:d,s:i,s:i,s:d,s:i,s:i,s:d,s:d,s:d,s:i}", "nodes", r.nodes,
      "kernels", r.kernels, "distinct_kernels", r.distinct_kernels, "library_calls", r.library_calls,
      "fused_ops", r.fused_ops, "epilogue_ops", r.epilogue_ops, "fallbacks", r.fallbacks, "compile_ms", r.compile_ms,
      "build_ms", r.build_ms, "cache_hit", r.cache_hit, "lower_ms", r.lower_ms, "fuse_ms", r.fuse_ms,
      "plan_ms", r.plan_ms, "codegen_ms", r.codegen_ms, "load_ms", r.load_ms, "index_async", r.index_async,
      "unaligned_variants", r.unaligned_variants, "variant_ms", r.variant_ms, "nvrtc_chunks", r.nvrtc_chunks,
      "nvrtc_processes", r.nvrtc_processes, "nvrtc_ms", r.nvrtc_ms, "nvrtc_chunk_max_ms", r.nvrtc_chunk_max_ms,
      "nvrtc_chunk_sum_ms", r.nvrtc_chunk_sum_ms, "c_parts", r.c_parts);
}

/* report(): the report alone, as it stands now (runs build unaligned variants). */
static PyObject *Program_report(ProgramObject *self, PyObject *noargs) {
  (void)noargs;
  return report_dict(self->p);
}

/* Everything the Python side needs to run the program, as plain objects. */
static PyObject *Program_info(ProgramObject *self, PyObject *unused) {
  ember_program *p = self->p;
  PyObject *values = PyList_New(self->nvalues);
  for (int i = 0; i < self->nvalues; i++) {
    ember_value_info vi;
    ember_program_value(p, i, &vi);
    PyList_SET_ITEM(values, i, Py_BuildValue("{s:i,s:i,s:N,s:N,s:L,s:i,s:L,s:n,s:i,s:i,s:i,s:i,s:i,s:n,s:n}",
        "storage", vi.storage, "dtype", vi.dtype, "sizes", ints_tuple(vi.sizes, vi.ndim),
        "strides", ints_tuple(vi.strides, vi.ndim), "offset", (long long)vi.storage_offset,
        "root", vi.root, "root_delta", (long long)vi.root_delta, "arena_offset", (Py_ssize_t)vi.arena_offset,
        "needs_tensor", vi.needs_tensor, "first_step", vi.first_step, "last_step", vi.last_step,
        "drop_step", vi.drop_step, "host_alloc", vi.host_alloc, "host_bytes", (Py_ssize_t)vi.host_bytes,
        "block_offset", (Py_ssize_t)vi.block_offset));
  }
  int ns = ember_program_num_steps(p);
  PyObject *steps = PyList_New(ns);
  for (int i = 0; i < ns; i++) {
    int kind, index;
    ember_program_step(p, i, &kind, &index);
    PyList_SET_ITEM(steps, i, Py_BuildValue("(ii)", kind, index));
  }
  PyObject *fallbacks = PyDict_New();
  for (int i = 0; i < ns; i++) {
    int kind, index;
    ember_program_step(p, i, &kind, &index);
    if (kind != EMBER_STEP_FALLBACK) continue;
    const int *outs;
    int no = ember_program_node_outputs(p, index, &outs);
    PyObject *ol = PyList_New(no);
    for (int k = 0; k < no; k++) PyList_SET_ITEM(ol, k, PyLong_FromLong(outs[k]));
    /* the tensor arguments' value ids, as the program has them (-1: not one tensor) */
    int na = 0;
    while (ember_program_node_arg(p, index, na) != -2) na++;
    PyObject *al = PyList_New(na);
    for (int k = 0; k < na; k++) PyList_SET_ITEM(al, k, PyLong_FromLong(ember_program_node_arg(p, index, k)));
    PyObject *key = PyLong_FromLong(index);
    PyObject *val = Py_BuildValue("{s:s,s:s,s:N,s:N,s:s}", "op", ember_program_node_op(p, index),
        "name", ember_program_node_name(p, index), "outs", ol, "args", al,
        "reason", ember_program_fallback_reason(p, index) ? ember_program_fallback_reason(p, index) : "");
    PyDict_SetItem(fallbacks, key, val);
    Py_DECREF(key), Py_DECREF(val);
  }
  int ni = ember_program_num_inputs(p), no = ember_program_num_outputs(p);
  PyObject *inputs = PyList_New(ni), *outputs = PyList_New(no);
  for (int i = 0; i < ni; i++) PyList_SET_ITEM(inputs, i, PyLong_FromLong(ember_program_input(p, i)));
  for (int i = 0; i < no; i++) PyList_SET_ITEM(outputs, i, PyLong_FromLong(ember_program_output(p, i)));
  PyObject *report = report_dict(p);
  const char *src = ember_program_source(p);
  return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N,s:n,s:n,s:N,s:s,s:n,s:i,s:i}", "values", values, "steps", steps,
      "fallbacks", fallbacks, "inputs", inputs, "outputs", outputs,
      "arena_bytes", (Py_ssize_t)ember_program_arena_bytes(p),
      "block_bytes", (Py_ssize_t)ember_program_block_bytes(p), "report", report, "source", src ? src : "",
      "source_head", (Py_ssize_t)ember_program_source_head(p), "cuda", ember_program_is_cuda(p),
      "num_syms", ember_program_num_syms(p));
}

/* pool_outputs(start) -> (block_bytes, {value id: (host_alloc, host_bytes, block_offset)}): the
   plan of the host values after pooling the outputs from position start on (src/plan.c). */
static PyObject *Program_pool_outputs(ProgramObject *self, PyObject *args) {
  int start;
  if (!PyArg_ParseTuple(args, "i", &start)) return NULL;
  if (ember_program_pool_outputs(self->p, start)) {
    set_error_of(EmberError, ember_program_error(self->p));
    return NULL;
  }
  PyObject *host = PyDict_New();
  for (int i = 0; host && i < self->nvalues; i++) {
    ember_value_info vi;
    ember_program_value(self->p, i, &vi);
    if (vi.storage != EMBER_STORE_HOST) continue;
    PyObject *key = PyLong_FromLong(i), *val = Py_BuildValue("(inn)", vi.host_alloc, (Py_ssize_t)vi.host_bytes,
                                                             (Py_ssize_t)vi.block_offset);
    int bad = !key || !val || PyDict_SetItem(host, key, val) < 0;
    Py_XDECREF(key), Py_XDECREF(val);
    if (bad) Py_CLEAR(host);
  }
  if (!host) return NULL;
  return Py_BuildValue("(nN)", (Py_ssize_t)ember_program_block_bytes(self->p), host);
}

/* "data_ptr", interned once: a run reads every tensor's pointer through it
   (its inputs', host tensors' and fallback results'), without making the
   name's string and looking it up at each */
static PyObject *s_data_ptr;

static int tensor_ptr(PyObject *t, void **out) {
  PyObject *r = PyObject_CallMethodNoArgs(t, s_data_ptr);
  if (!r) return -1;
  *out = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  return PyErr_Occurred() ? -1 : 0;
}

/* One run's client state, on Program_run's stack: each run has its own, so
   runs of one program from several threads never share it. */
typedef struct {
  PyObject *vals;          /* list: the tensors of this run, by value id */
  PyObject *fallback;      /* callable: fallback(call, node) */
  PyObject *call;          /* the client's per-call object, passed back to fallback */
  ember_program *p;
} FbCtx;

static int run_fallback(void *ctx_, int node, void **ptrs) {
  FbCtx *ctx = ctx_;
  PyObject *nid = PyLong_FromLong(node);
  if (!nid) return -1;
  PyObject *argv[3] = {NULL, ctx->call, nid};  /* argv[0]: room for a bound method's self */
  PyObject *r = PyObject_Vectorcall(ctx->fallback, argv + 1, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  Py_DECREF(nid);
  if (!r) return -1;
  Py_DECREF(r);
  const int *outs;
  int no = ember_program_node_outputs(ctx->p, node, &outs);
  for (int k = 0; k < no; k++) {
    PyObject *t = PyList_GetItem(ctx->vals, outs[k]);
    if (!t) return -1;
    if (t == Py_None) continue;
    if (tensor_ptr(t, &ptrs[outs[k]]) < 0) return -1;
  }
  return 0;
}

/* run(vals, arena, fallback, stream, call): vals holds the inputs' and host
   tensors by value id; a fallback step calls fallback(call, node id), call
   being the client's object for this run (its working state, which must not
   live on anything that runs of the program from other threads share).  The
   run holds the GIL, so kernels of one program never run in two threads at
   once (the CPU kernels' error flags are their object's, src/run.c); only a
   fallback, running Python and torch, lets other threads in, which may then
   run this program too: a run's pointer table is on this stack. */
static PyObject *Program_run(ProgramObject *self, PyObject *args) {
  PyObject *vals, *arena, *fallback, *call = Py_None, *syms = Py_None;
  unsigned long long stream = 0;
  if (!PyArg_ParseTuple(args, "O!OO|KOO", &PyList_Type, &vals, &arena, &fallback, &stream, &call, &syms)) return NULL;
  if (PyList_GET_SIZE(vals) != self->nvalues)
    return PyErr_Format(EmberError, "ember: run needs %d values, got %zd", self->nvalues, PyList_GET_SIZE(vals));
  int64_t sv[EMBER_MAX_SYMS];
  int nsv = 0;
  if (syms != Py_None && !read_ints(syms, sv, EMBER_MAX_SYMS, &nsv, "size variables")) return NULL;
  if (nsv != ember_program_num_syms(self->p))
    return PyErr_Format(EmberError, "ember: run needs %d size variables, got %d", ember_program_num_syms(self->p), nsv);
  void *stack[256];
  /* one slot more than the values: a symbolic program's size variables (ember_program_run_sized) */
  void **ptrs = self->nvalues < 256 ? stack : calloc(self->nvalues + 1, sizeof(void *));
  if (!ptrs) return PyErr_NoMemory();
  PyObject *result = NULL;
  for (int i = 0; i < self->nvalues; i++) {
    ptrs[i] = NULL;
    PyObject *t = PyList_GET_ITEM(vals, i);
    if (t != Py_None && tensor_ptr(t, &ptrs[i]) < 0) goto done;
  }
  void *ap = NULL;
  if (arena != Py_None && tensor_ptr(arena, &ap) < 0) goto done;
  FbCtx ctx = {vals, fallback, call, self->p};
  int rc = ember_program_run_sized(self->p, nsv ? sv : NULL, ptrs, ap, (void *)(uintptr_t)stream, run_fallback, &ctx);
  if (rc) {
    /* the message is the program's: read at once, before anything could let another run in */
    if (!PyErr_Occurred())
      set_error_of(rc == EMBER_EINDEX ? EmberIndexError : EmberError, ember_program_error(self->p));
    goto done;
  }
  result = Py_None;
  Py_INCREF(result);
done:
  if (ptrs != stack) free(ptrs);
  return result;
}

/* value_sizes(v, syms) -> (sizes, strides, root_delta) of value v at these size variables. */
static PyObject *Program_value_sizes(ProgramObject *self, PyObject *args) {
  int v;
  PyObject *syms;
  if (!PyArg_ParseTuple(args, "iO", &v, &syms)) return NULL;
  int64_t sv[EMBER_MAX_SYMS], sz[EMBER_MAX_DIMS], st[EMBER_MAX_DIMS], delta = 0;
  int nsv = 0;
  if (!read_ints(syms, sv, EMBER_MAX_SYMS, &nsv, "size variables")) return NULL;
  ember_value_info vi;
  if (nsv != ember_program_num_syms(self->p) || ember_program_value(self->p, v, &vi) ||
      ember_program_value_sizes(self->p, v, sv, sz, st, &delta))
    return PyErr_Format(EmberError, "ember: value_sizes: no value %d, or not %d size variables", v,
                        ember_program_num_syms(self->p));
  return Py_BuildValue("(NNL)", ints_tuple(sz, vi.ndim), ints_tuple(st, vi.ndim), (long long)delta);
}

/* sized(syms, vids) -> (arena_bytes, [(sizes, strides, root_delta, arena_offset or -1) per value id]):
   what a run at these size variables needs to know of the arena and of these values, in one call. */
static PyObject *Program_sized(ProgramObject *self, PyObject *args) {
  PyObject *syms, *vids;
  if (!PyArg_ParseTuple(args, "OO", &syms, &vids)) return NULL;
  int64_t sv[EMBER_MAX_SYMS], sz[EMBER_MAX_DIMS], st[EMBER_MAX_DIMS];
  int nsv = 0;
  if (!read_ints(syms, sv, EMBER_MAX_SYMS, &nsv, "size variables")) return NULL;
  if (nsv != ember_program_num_syms(self->p))
    return PyErr_Format(EmberError, "ember: sized needs %d size variables", ember_program_num_syms(self->p));
  PyObject *fast = PySequence_Fast(vids, "value ids");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject *out = PyList_New(n);
  for (Py_ssize_t i = 0; out && i < n; i++) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
    ember_value_info vi;
    int64_t delta = 0;
    if ((v == -1 && PyErr_Occurred()) || v < 0 || v >= self->nvalues || ember_program_value(self->p, (int)v, &vi) ||
        ember_program_value_sizes(self->p, (int)v, sv, sz, st, &delta)) {
      if (!PyErr_Occurred()) PyErr_Format(EmberError, "ember: sized: no value %ld", v);
      Py_CLEAR(out);
      break;
    }
    int64_t off = vi.storage == EMBER_STORE_ARENA ? ember_program_arena_offset(self->p, (int)v, sv) : -1;
    PyObject *e = Py_BuildValue("(NNLL)", ints_tuple(sz, vi.ndim), ints_tuple(st, vi.ndim), (long long)delta,
                                (long long)off);
    if (!e) Py_CLEAR(out);
    else PyList_SET_ITEM(out, i, e);
  }
  Py_DECREF(fast);
  if (!out) return NULL;
  return Py_BuildValue("(nN)", (Py_ssize_t)ember_program_arena_bytes_for(self->p, sv), out);
}

/* arena_bytes_for(syms): the arena a run at these size variables needs. */
static PyObject *Program_arena_bytes_for(ProgramObject *self, PyObject *args) {
  PyObject *syms;
  if (!PyArg_ParseTuple(args, "O", &syms)) return NULL;
  int64_t sv[EMBER_MAX_SYMS];
  int nsv = 0;
  if (!read_ints(syms, sv, EMBER_MAX_SYMS, &nsv, "size variables")) return NULL;
  if (nsv != ember_program_num_syms(self->p))
    return PyErr_Format(EmberError, "ember: arena_bytes_for needs %d size variables", ember_program_num_syms(self->p));
  return PyLong_FromSize_t(ember_program_arena_bytes_for(self->p, sv));
}

/* arena_offset(v, syms): ARENA value v's byte offset in the arena at these size variables. */
static PyObject *Program_arena_offset(ProgramObject *self, PyObject *args) {
  int v;
  PyObject *syms;
  if (!PyArg_ParseTuple(args, "iO", &v, &syms)) return NULL;
  int64_t sv[EMBER_MAX_SYMS];
  int nsv = 0;
  if (!read_ints(syms, sv, EMBER_MAX_SYMS, &nsv, "size variables")) return NULL;
  int64_t off = nsv == ember_program_num_syms(self->p) ? ember_program_arena_offset(self->p, v, sv) : -1;
  if (off < 0) return PyErr_Format(EmberError, "ember: arena_offset: value %d has no arena offset at these sizes", v);
  return PyLong_FromLongLong(off);
}

/* check(stream=0): after replaying a CUDA graph of the program, raise what its kernels recorded. */
static PyObject *Program_check(ProgramObject *self, PyObject *args) {
  unsigned long long stream = 0;
  if (!PyArg_ParseTuple(args, "|K", &stream)) return NULL;
  int rc = ember_program_check(self->p, (void *)(uintptr_t)stream);
  if (rc) {
    set_error_of(rc == EMBER_EINDEX ? EmberIndexError : EmberError, ember_program_error(self->p));
    return NULL;
  }
  Py_RETURN_NONE;
}

static void Program_dealloc(ProgramObject *self) {
  ember_program_free(self->p);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The program as bytes (src/program_io.c), for ember._precompile's saved graphs. */
static PyObject *Program_save(ProgramObject *self, PyObject *noargs) {
  void *buf = NULL;
  size_t n = 0;
  if (ember_program_save(self->p, &buf, &n) != EMBER_OK) {
    set_error(ember_program_error(self->p));
    return NULL;
  }
  PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
  free(buf);
  return b;
}

static PyMethodDef Program_methods[] = {
  {"save", (PyCFunction)Program_save, METH_NOARGS,
   "save() -> bytes: the program, its kernels' object included, for load_program (CPU programs)"},
  {"info", (PyCFunction)Program_info, METH_NOARGS, "info() -> dict describing values, steps, fallbacks"},
  {"run", (PyCFunction)Program_run, METH_VARARGS,
   "run(vals, arena, fallback, stream=0, call=None, syms=None): a fallback step calls fallback(call, node id)"},
  {"arena_bytes_for", (PyCFunction)Program_arena_bytes_for, METH_VARARGS,
   "arena_bytes_for(syms) -> the arena bytes a run at these size variables needs"},
  {"arena_offset", (PyCFunction)Program_arena_offset, METH_VARARGS,
   "arena_offset(v, syms) -> an arena value's byte offset at these size variables"},
  {"sized", (PyCFunction)Program_sized, METH_VARARGS,
   "sized(syms, vids) -> (arena_bytes, [(sizes, strides, root_delta, arena_offset or -1) per value])"},
  {"value_sizes", (PyCFunction)Program_value_sizes, METH_VARARGS,
   "value_sizes(v, syms) -> (sizes, strides, root_delta) at these size variables"},
  {"report", (PyCFunction)Program_report, METH_NOARGS, "report() -> dict: the compile report, with the "
   "unaligned variants built by runs so far"},
  {"pool_outputs", (PyCFunction)Program_pool_outputs, METH_VARARGS,
   "pool_outputs(start) -> (block bytes, {host value id: (host_alloc, host_bytes, block_offset)}): "
   "the outputs from position start on come from one block per call (CUDA)"},
  {"check", (PyCFunction)Program_check, METH_VARARGS,
   "check(stream=0): raise what the kernels recorded (an index out of range) after a CUDA graph replay, "
   "or (asynchronous check) in an earlier run"},
  {NULL, NULL, 0, NULL}};

static PyTypeObject ProgramType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "ember._ext.Program",
  .tp_basicsize = sizeof(ProgramObject),
  .tp_dealloc = (destructor)Program_dealloc,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A graph compiled by ember's C core.",
  .tp_methods = Program_methods,
};

/* ------------------------------------------------------------ host memory */
/* The DLPack ABI (dlpack.h, version 0.x "dltensor" capsules), as much of it as
   a 1-D CPU byte tensor needs: torch.utils.dlpack.from_dlpack takes the
   capsule, and calls the deleter when the tensor's storage dies. */
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
enum { DL_CPU = 1, DL_UINT = 1 };

typedef struct { DLManagedTensor m; int64_t shape, stride; } HostTensor;

static void host_deleter(DLManagedTensor *m) {
  ember_host_free(m->dl_tensor.data);
  free(m);
}

static void host_capsule_destructor(PyObject *cap) {
  /* a capsule nobody consumed still owns its block */
  if (PyCapsule_IsValid(cap, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

/* host_empty(nbytes) -> a "dltensor" capsule of nbytes uint8 from ember's host block cache */
static PyObject *ext_host_empty(PyObject *mod, PyObject *args) {
  Py_ssize_t n;
  if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
  if (n <= 0) return PyErr_Format(PyExc_ValueError, "ember: host_empty needs a positive size, got %zd", n);
  HostTensor *h = calloc(1, sizeof *h);
  void *p = h ? ember_host_alloc((size_t)n) : NULL;
  if (!p) {
    free(h);
    return PyErr_NoMemory();
  }
  h->shape = n, h->stride = 1;
  h->m.dl_tensor = (DLTensor){p, {DL_CPU, 0}, 1, {DL_UINT, 8, 1}, &h->shape, &h->stride, 0};
  h->m.manager_ctx = h;
  h->m.deleter = host_deleter;
  PyObject *cap = PyCapsule_New(&h->m, "dltensor", host_capsule_destructor);
  if (!cap) host_deleter(&h->m);
  return cap;
}

/* host_cache(limit=-1) -> bytes cached now; with limit >= 0, sets the most bytes kept first */
static PyObject *ext_host_cache(PyObject *mod, PyObject *args) {
  long long limit = -1;
  if (!PyArg_ParseTuple(args, "|L", &limit)) return NULL;
  if (limit >= 0) ember_host_set_limit((size_t)limit);
  return PyLong_FromSize_t(ember_host_cached());
}

/* options_table() -> [dict]: src/options.def, one dict per option */
static PyObject *ext_options_table(PyObject *mod, PyObject *noargs) {
  int n = ember_option_count();
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    ember_option_info in;
    ember_option_describe(i, &in);
    PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:L,s:L}", "name", in.name, "type", in.type, "default",
                                in.dflt, "choices", in.choices, "who", in.who, "doc", in.doc, "lo",
                                (long long)in.lo, "hi", (long long)in.hi);
    if (!d) return Py_DECREF(list), NULL;
    PyList_SET_ITEM(list, i, d);
  }
  return list;
}

/* options_resolve(values, read_env) -> {name: text}: every option after the
   environment's EMBER_<NAME> (if read_env) and then values ({name: text}) */
static PyObject *ext_options_resolve(PyObject *mod, PyObject *args) {
  PyObject *vals;
  int read_env = 1;
  if (!PyArg_ParseTuple(args, "O!|p", &PyDict_Type, &vals, &read_env)) return NULL;
  ember_options *o = options_from(vals, read_env);
  if (!o) return NULL;
  PyObject *out = PyDict_New();
  char buf[4096];
  for (int i = 0, n = ember_option_count(); out && i < n; i++) {
    ember_option_info in;
    ember_option_describe(i, &in);
    ember_options_get(o, in.name, buf, sizeof buf);
    PyObject *v = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
    if (!v || PyDict_SetItemString(out, in.name, v)) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  ember_options_free(o);
  return out;
}

/* ops() -> [(ATen name, expanded)]: the ops ember computes itself (src/ops.def); expanded: replaced
   by their formula in other ops (src/expand.c). */
static PyObject *ext_ops(PyObject *mod, PyObject *noargs) {
  (void)mod, (void)noargs;
  int n = ember_op_count();
  PyObject *l = PyList_New(n);
  for (int i = 0; l && i < n; i++) {
    int expanded = 0;
    const char *name = ember_op_name(i, &expanded);
    PyObject *t = Py_BuildValue("(sO)", name, expanded ? Py_True : Py_False);
    if (!t) {
      Py_CLEAR(l);
      break;
    }
    PyList_SET_ITEM(l, i, t);
  }
  return l;
}

static PyObject *ext_load_program(PyObject *mod, PyObject *args) {
  Py_buffer view;
  if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
  char err[4096] = "";
  ember_program *p = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = ember_program_load(view.buf, (size_t)view.len, &p, err, sizeof err);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (rc != EMBER_OK) {
    set_error(err);
    return NULL;
  }
  return program_object(p);
}

static PyObject *ext_gemm_cache_dir(PyObject *mod, PyObject *args) {
  const char *dir = NULL;
  if (!PyArg_ParseTuple(args, "z", &dir)) return NULL;
  ember_gemm_cache_dir(dir);
  Py_RETURN_NONE;
}

/* gemm_choices(start=0) -> [dict]: the matrix products this process tuned, from index start on */
static PyObject *ext_gemm_choices(PyObject *mod, PyObject *args) {
  int start = 0;
  if (!PyArg_ParseTuple(args, "|i", &start)) return NULL;
  int n = ember_gemm_choices(-1, NULL);
  if (start < 0) start = 0;
  PyObject *list = PyList_New(0);
  for (int i = start; list && i < n; i++) {
    ember_gemm_choice c;
    ember_gemm_choices(i, &c);
    PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:d,s:d,s:i,s:O,s:d,s:s}", "problem", c.problem, "default", c.dflt,
                                "chosen", c.chosen, "default_ms", c.dflt_ms, "chosen_ms", c.chosen_ms, "candidates",
                                c.candidates, "from_disk", c.from_disk ? Py_True : Py_False, "tune_ms", c.tune_ms,
                                "note", c.note);
    if (!d || PyList_Append(list, d)) Py_CLEAR(list);
    Py_XDECREF(d);
  }
  return list;
}

/* gemm_budget_reset(): the GEMM tuning's per-graph budget starts again (before a graph's first run) */
static PyObject *ext_gemm_budget_reset(PyObject *mod, PyObject *noargs) {
  ember_gemm_budget_reset();
  Py_RETURN_NONE;
}

static PyMethodDef ext_methods[] = {
  {"load_program", ext_load_program, METH_VARARGS,
   "load_program(bytes) -> Program: a program from Program.save, checked before anything in it is loaded"},
  {"ops", ext_ops, METH_NOARGS, "ops() -> [(ATen name, expanded)]: the ops ember computes itself (src/ops.def)"},
  {"options_table", ext_options_table, METH_NOARGS, "options_table() -> [dict]: every option (src/options.def)"},
  {"options_resolve", ext_options_resolve, METH_VARARGS,
   "options_resolve(values, read_env=True) -> {name: text}: every option's value"},
  {"host_empty", ext_host_empty, METH_VARARGS,
   "host_empty(nbytes) -> DLPack capsule of nbytes uint8 (CPU) from ember's cache of large blocks"},
  {"gemm_budget_reset", ext_gemm_budget_reset, METH_NOARGS,
   "gemm_budget_reset(): the GEMM tuning's per-graph time budget starts again"},
  {"gemm_cache_dir", ext_gemm_cache_dir, METH_VARARGS,
   "gemm_cache_dir(path or None): where tuned GEMM choices are kept, for programs loaded, not compiled"},
  {"gemm_choices", ext_gemm_choices, METH_VARARGS,
   "gemm_choices(start=0) -> [dict]: the matrix products this process tuned (option tune_gemms), in order"},
  {"host_cache", ext_host_cache, METH_VARARGS,
   "host_cache(limit=-1) -> bytes kept for reuse; a limit >= 0 sets the most kept (0 releases all)"},
  {NULL, NULL, 0, NULL}};

static struct PyModuleDef ext_module = {PyModuleDef_HEAD_INIT, "ember._ext", "ember's C core.", -1, ext_methods};

PyMODINIT_FUNC PyInit__ext(void) {
  if (PyType_Ready(&GraphType) < 0 || PyType_Ready(&ProgramType) < 0) return NULL;
  PyObject *m = PyModule_Create(&ext_module);
  if (!m) return NULL;
  /* the exception classes are ember.errors' (importable without this module) */
  PyObject *errors = PyImport_ImportModule("ember.errors");
  if (!errors) return NULL;
  EmberError = PyObject_GetAttrString(errors, "EmberError");
  EmberIndexError = PyObject_GetAttrString(errors, "EmberIndexError");
  Py_DECREF(errors);
  if (!EmberError || !EmberIndexError) return NULL;
  if (!(s_data_ptr = PyUnicode_InternFromString("data_ptr"))) return NULL;
  Py_INCREF(&GraphType), Py_INCREF(&ProgramType);
  PyModule_AddObject(m, "Graph", (PyObject *)&GraphType);
  PyModule_AddObject(m, "Program", (PyObject *)&ProgramType);
  PyModule_AddObject(m, "EmberError", EmberError);
  Py_INCREF(EmberIndexError);
  PyModule_AddObject(m, "EmberIndexError", EmberIndexError);
  PyModule_AddStringConstant(m, "version", ember_version());
  ember_set_interrupt_check(check_interrupt);
  static const struct { const char *name; int v; } consts[] = {
    {"BOOL", EMBER_BOOL}, {"U8", EMBER_U8}, {"I8", EMBER_I8}, {"I16", EMBER_I16}, {"I32", EMBER_I32},
    {"I64", EMBER_I64}, {"F16", EMBER_F16}, {"BF16", EMBER_BF16}, {"F32", EMBER_F32}, {"F64", EMBER_F64},
    {"OPAQUE", EMBER_OPAQUE}, {"CPU", EMBER_CPU}, {"CUDA", EMBER_CUDA}, {"OTHER_DEVICE", EMBER_OTHER_DEVICE},
    {"STORE_NONE", EMBER_STORE_NONE}, {"STORE_INPUT", EMBER_STORE_INPUT}, {"STORE_HOST", EMBER_STORE_HOST},
    {"STORE_FALLBACK", EMBER_STORE_FALLBACK}, {"STORE_ARENA", EMBER_STORE_ARENA}, {"STORE_VIEW", EMBER_STORE_VIEW},
    {"STORE_INTO", EMBER_STORE_INTO},
    {"STEP_KERNEL", EMBER_STEP_KERNEL}, {"STEP_FALLBACK", EMBER_STEP_FALLBACK},
    {"HOST_TORCH", EMBER_HOST_TORCH}, {"HOST_CACHE", EMBER_HOST_CACHE}, {"HOST_BLOCK", EMBER_HOST_BLOCK},
    {"PROGRAM_FORMAT", EMBER_PROGRAM_FORMAT},
    {"SIZE_ADD", EMBER_SIZE_ADD}, {"SIZE_MUL", EMBER_SIZE_MUL}, {"SIZE_FLOORDIV", EMBER_SIZE_FLOORDIV},
    {"SIZE_MOD", EMBER_SIZE_MOD}, {"SIZE_MIN", EMBER_SIZE_MIN}, {"SIZE_MAX", EMBER_SIZE_MAX},
  };
  PyModule_AddStringConstant(m, "SYMBOLIC_REFUSED", EMBER_SYMBOLIC_REFUSED);
  PyModule_AddObject(m, "HOST_CACHE_MIN", PyLong_FromSize_t(EMBER_HOST_CACHE_MIN));
  PyModule_AddObject(m, "SIZE_INF", PyLong_FromLongLong(EMBER_SIZE_INF));
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) PyModule_AddIntConstant(m, consts[i].name, consts[i].v);
  /* DTYPE_CODES: torch dtype -> ember dtype code, for clients of the builder */
  PyObject *torch = PyImport_ImportModule("torch");
  if (!torch) {
    PyErr_Clear();
    return m;
  }
  static const struct { const char *name; int v; } dts[] = {
    {"bool", EMBER_BOOL}, {"uint8", EMBER_U8}, {"int8", EMBER_I8}, {"int16", EMBER_I16}, {"int32", EMBER_I32},
    {"int64", EMBER_I64}, {"float16", EMBER_F16}, {"bfloat16", EMBER_BF16}, {"float32", EMBER_F32},
    {"float64", EMBER_F64},
  };
  PyObject *codes = PyDict_New();
  for (size_t i = 0; codes && i < sizeof dts / sizeof dts[0]; i++) {
    PyObject *dt = PyObject_GetAttrString(torch, dts[i].name), *v = PyLong_FromLong(dts[i].v);
    if (dt && v) PyDict_SetItem(codes, dt, v);
    Py_XDECREF(dt), Py_XDECREF(v);
  }
  PyErr_Clear();
  Py_DECREF(torch);
  if (codes) PyModule_AddObject(m, "DTYPE_CODES", codes);
  return m;
}
