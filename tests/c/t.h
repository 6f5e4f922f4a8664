/* t.h - the C unit tests' few macros.  Each test file is one program; it
   prints one line per failed check and a closing "N passed, N failed". */
#ifndef EMBER_T_H
#define EMBER_T_H
#include <stdio.h>
static int t_pass, t_fail;
#define CHECK(c) do { if (c) t_pass++; else { t_fail++; \
  fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); } } while (0)
#define CHECK_MSG(c, ...) do { if (c) t_pass++; else { t_fail++; \
  fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #c); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define T_DONE(name) (printf("%s: %d passed, %d failed\n", name, t_pass, t_fail), t_fail != 0)
#endif
