# The C unit tests, built with AddressSanitizer and UBSan.  `make check` runs
# them all; the Python package is built by setup.py, not here.
CC ?= cc
CFLAGS_T = -std=gnu11 -g -O1 -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc -Ibuild/gen \
           -fsanitize=address,undefined -fno-omit-frame-pointer
LDLIBS_T = -ldl -lm
BIN = tests/c/bin
CORE = $(filter-out src/prelude.h,$(wildcard src/*.c))

TESTS = test_expr test_cache test_build test_prelude test_compile test_program test_cuda test_hostmem \
        test_gemm_tune test_gemm_mock

.PHONY: check clean
check: $(addprefix $(BIN)/,$(TESTS))
	@set -e; for t in $(TESTS); do ASAN_OPTIONS=detect_leaks=1 $(BIN)/$$t; done

$(BIN):
	mkdir -p $(BIN)

$(BIN)/test_expr: tests/c/test_expr.c src/expr.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_expr.c src/expr.c src/util.c $(LDLIBS_T)

$(BIN)/test_cache: tests/c/test_cache.c src/cache.c src/build.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_cache.c src/cache.c src/build.c src/util.c $(LDLIBS_T)

$(BIN)/test_build: tests/c/test_build.c src/cache.c src/build.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_build.c src/cache.c src/build.c src/util.c $(LDLIBS_T)

PRELUDE_SHARED = src/prelude.h src/special.h
$(BIN)/test_prelude: tests/c/test_prelude.c src/prelude_c.h $(PRELUDE_SHARED) | $(BIN)
	$(CC) $(CFLAGS_T) -fno-math-errno -o $@ tests/c/test_prelude.c $(LDLIBS_T)

build/gen/prelude_gen.h: src/prelude_c.h $(PRELUDE_SHARED) tools/embed.py
	python3 tools/embed.py src/prelude_c.h $@

build/gen/prelude_cuda_gen.h: src/prelude_cuda.h $(PRELUDE_SHARED) tools/embed.py
	python3 tools/embed.py src/prelude_cuda.h $@ em_prelude_cuda

$(BIN)/test_compile: tests/c/test_compile.c $(CORE) src/ember_int.h src/ops.def build/gen/prelude_gen.h build/gen/prelude_cuda_gen.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_compile.c $(CORE) $(LDLIBS_T)

$(BIN)/test_program: tests/c/test_program.c $(CORE) src/ember_int.h src/ops.def build/gen/prelude_gen.h build/gen/prelude_cuda_gen.h | $(BIN)
	$(CC) $(CFLAGS_T) -rdynamic -o $@ tests/c/test_program.c $(CORE) $(LDLIBS_T) -lpthread

clean:
	rm -rf $(BIN)

$(BIN)/test_cuda: tests/c/test_cuda.c src/cuda.c src/blas.c src/cache.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_cuda.c src/cuda.c src/blas.c src/cache.c src/util.c $(LDLIBS_T) -lpthread

$(BIN)/test_gemm_tune: tests/c/test_gemm_tune.c src/cuda.c src/blas.c src/cache.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_gemm_tune.c src/cuda.c src/blas.c src/cache.c src/util.c $(LDLIBS_T) -lpthread

# stand-ins for libcuda, cuBLASLt and cuBLAS (tests/c/mock_cuda.c), named as the real ones
MOCK = $(BIN)/mock
MOCK_CC = $(CC) -std=gnu11 -O1 -g -fPIC -shared -Wall -Wno-unused-parameter
$(MOCK)/libcuda.so.1: tests/c/mock_cuda.c | $(BIN)
	mkdir -p $(MOCK)
	$(MOCK_CC) -DMOCK_CUDA -Wl,-soname,libcuda.so.1 -o $@ tests/c/mock_cuda.c -lm
$(MOCK)/libcublasLt.so.13: tests/c/mock_cuda.c $(MOCK)/libcuda.so.1
	$(MOCK_CC) -DMOCK_LT -Wl,-soname,libcublasLt.so.13 -o $@ tests/c/mock_cuda.c $(MOCK)/libcuda.so.1 -lm
$(MOCK)/libcublas.so.13: tests/c/mock_cuda.c $(MOCK)/libcuda.so.1
	$(MOCK_CC) -DMOCK_CB -Wl,-soname,libcublas.so.13 -o $@ tests/c/mock_cuda.c $(MOCK)/libcuda.so.1 -lm

$(BIN)/test_gemm_mock: tests/c/test_gemm_mock.c src/cuda.c src/blas.c src/cache.c src/util.c src/ember_int.h \
                       $(MOCK)/libcuda.so.1 $(MOCK)/libcublasLt.so.13 $(MOCK)/libcublas.so.13 | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_gemm_mock.c src/cuda.c src/blas.c src/cache.c src/util.c $(LDLIBS_T) -lpthread

$(BIN)/test_hostmem: tests/c/test_hostmem.c src/hostmem.c src/util.c src/ember_int.h | $(BIN)
	$(CC) $(CFLAGS_T) -o $@ tests/c/test_hostmem.c src/hostmem.c src/util.c $(LDLIBS_T) -lpthread
