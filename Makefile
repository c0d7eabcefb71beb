# strata build. `make` builds build/strata; `make test` installs what is missing,
# builds and runs every test; `make asan` does the same under ASan + UBSan.
# Sources are found by wildcard: a new file in a room is built without editing this.

CC      ?= gcc
CXX     ?= g++
NVCC    ?= nvcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
# gcc's -Wformat-truncation flags snprintf into fixed buffers that truncate on purpose
GCC_ONLY = $(if $(findstring clang,$(CC)),,-Wno-format-truncation)
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -I. -pthread -fno-strict-aliasing $(GCC_ONLY) $(SAN)
CXXFLAGS+= -std=c++17 $(OPT) -g -Wall -Wextra -Werror -I. -pthread $(SAN)
LDLIBS  += -ljansson -luv -lmicrohttpd -lcurl -lcrypto -lonig -lsentencepiece -lstdc++ -lm -lpthread -ldl
LDFLAGS += $(SAN)

# Per-ISA kernel files carry their own target flags; dispatch picks one at run time.
ISA_AVX2   = -mavx2 -mfma -mf16c
ISA_AVX512 = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mfma -mf16c

MAIN_SRC  = server/cli/main.c
# every room's sources (docs/design.md): a room's subfolders are rooms of their own
ROOMS     = engine engine/base engine/unicode engine/text engine/template engine/hub engine/constrain models \
            models/load kernels kernels/cpu server server/cli config
LIB_C     = $(filter-out $(MAIN_SRC),$(foreach r,$(ROOMS),$(wildcard $(r)/*.c)))
LIB_CC    = $(foreach r,$(ROOMS),$(wildcard $(r)/*.cc))
LIB_OBJ   = $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CC:%.cc=$(BUILD)/%.o)
TEST_SRC  = $(wildcard tests/unit/test_*.c)
TEST_BIN  = $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
CU_SRC    = $(wildcard kernels/cuda/*.cu)

.PHONY: all test asan check unit house-check format-check format cuda-check fuzz goldens clean deps bench device-bundle run cuda
all: $(BUILD)/strata

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/kernels/cpu/%_avx2.o: kernels/cpu/%_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX2) -MMD -MP -c $< -o $@

$(BUILD)/kernels/cpu/%_avx512.o: kernels/cpu/%_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_AVX512) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libstrata.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/strata: $(BUILD)/server/cli/main.o $(BUILD)/libstrata.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/libstrata.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

deps:
	@tools/install-deps.sh

# The one test command: installs what is missing, builds, runs unit + golden tests,
# the CUDA compile check, the CUDA kernels on the CPU (tests/cuda-host), the sanitizer
# run and the bounded fuzz runs.
# Every suite runs even when an earlier one failed; the summary counts a suite that
# recorded nothing (say, a build error) as failed and sets the exit status.
test: deps
	@rm -f build/test-summary
	-$(MAKE) house-check
	-$(MAKE) check
	-$(MAKE) cuda-check
	-$(MAKE) cuda-host-check
	-$(MAKE) asan-check
	-$(MAKE) fuzz
	@tests/summary.sh house build cuda-check cuda-host build-asan fuzz

check: $(BUILD)/strata $(TEST_BIN)
	@BUILD=$(BUILD) tests/run.sh

# The C unit and golden tests alone (no HTTP, hub or deploy suites): the quick loop.
unit: $(TEST_BIN)
	@BUILD=$(BUILD) UNIT_ONLY=1 tests/run.sh

# Rooms and doors (docs/design.md), comments naming real files, formatting.
house-check:
	@tests/house.sh

# clang-format (.clang-format) over the tree: format-check fails on a difference
# (part of make test, through house-check); format rewrites the files.
format-check:
	@tools/format.sh --check

format:
	@tools/format.sh

asan:
	@tools/install-deps.sh
	@rm -f build/test-summary
	-$(MAKE) asan-check
	@tests/summary.sh build-asan

# STRATA_TEST_QUICK: the conformance-sized tests check a sample of their cases (every 10th
# tokenizer case, one checkpoint in tests/quantize): the plain run checks them all.
asan-check:
	STRATA_TEST_QUICK=1 $(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" check

cuda-check:
	@tests/cuda_check.sh $(CU_SRC) tests/cuda-host/test_runtime.cu

fuzz:
	@tests/fuzz/run.sh

goldens:
	@tools/install-deps.sh --python-goldens
	python3 tools/goldens/make_goldens.py

# The README's first command: installs what is missing, builds, serves the demo model
# (models/demo) or the one given: make run ARGS="--model Qwen/Qwen3.5-0.8B --port 9000".
run:
	@BUILD=$(BUILD) tools/run.sh $(ARGS)

# device-bundle/: one tarball of strata, the CUDA library and device tests, the shared
# libraries they need and the device tools, carried to the GPU machine with the tree
# (tests/device/run.sh unpacks and runs it there; tools/device_bundle.sh says what is in it).
device-bundle:
	@tools/device_bundle.sh

# The CUDA backend as a shared object the strata binary loads at run time
# (kernels/backend_select.c): build/libstrata_cuda.so, sm_90 code plus compute_90 PTX,
# static cudart, cuBLAS. Only the strata_cuda_* / cuda_backend_* entry points are exported.
CUDA_HOME  ?= /usr/local/cuda
CUDA_NVCC  := $(shell command -v $(NVCC) 2>/dev/null || echo $(CUDA_HOME)/bin/nvcc)
CUDA_ARCH   = -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
# CUDA_DEFS: extra defines for an A/B build of the library, e.g. -DSTRATA_CUDA_PDL=0
CUDA_DEFS  ?=
CUDA_FLAGS  = -std=c++17 -I. -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra,-fPIC,-fvisibility=hidden $(CUDA_ARCH) $(CUDA_DEFS)
CUDA_OBJ    = $(CU_SRC:%.cu=$(BUILD)/%.o) $(BUILD)/cuda-lib/err.o $(BUILD)/cuda-lib/dtype.o
CUDA_DEPS   = $(wildcard kernels/cuda/*.cuh kernels/cuda/*.h) kernels/backend.h engine/base/err.h engine/base/dtype.h

cuda: $(BUILD)/libstrata_cuda.so

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu $(CUDA_DEPS)
	@mkdir -p $(dir $@)
	$(CUDA_NVCC) $(CUDA_FLAGS) -c $< -o $@

$(BUILD)/cuda-lib/%.o: engine/base/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/libstrata_cuda.so: $(CUDA_OBJ)
	$(CUDA_NVCC) -shared $(CUDA_ARCH) -cudart static -o $@ $^ -lcublas -Xlinker --exclude-libs,ALL -Xlinker -z,defs \
	    -Xlinker -rpath,'$$ORIGIN':$(CUDA_HOME)/lib64 -lrt -ldl -lpthread

# kernels/cuda compiled for the CPU with the host runtime (tests/cuda-host/README.md):
# build/cuda-host/libstrata_cuda.so, loaded through STRATA_CUDA_LIB by the CUDA op and
# golden tests, which `make cuda-host-check` runs (part of make test).
HC_DIR     = $(BUILD)/cuda-host
HC_GEN     = $(HC_DIR)/src/kernels/cuda
HC_CU      = $(CU_SRC:kernels/cuda/%.cu=$(HC_GEN)/%.cu)
HC_CUH     = $(patsubst kernels/cuda/%,$(HC_GEN)/%,$(wildcard kernels/cuda/*.cuh))
HC_RT      = $(wildcard tests/cuda-host/*.cc)
HC_OBJ     = $(HC_CU:%.cu=%.o) $(HC_RT:tests/cuda-host/%.cc=$(HC_DIR)/rt/%.o) \
             $(HC_DIR)/rt/err.o $(HC_DIR)/rt/dtype.o
HC_FLAGS   = -std=c++17 -O2 -g -fPIC -Wall -Wextra -Werror -Wno-unknown-pragmas -pthread \
             -Itests/cuda-host/include -I$(HC_DIR)/src -I.
HC_TESTS   = $(HC_DIR)/test_cuda_ops $(HC_DIR)/test_runtime $(HC_DIR)/test_cuda_engine \
             $(HC_DIR)/test_cuda_quant_model \
             $(patsubst %,$(HC_DIR)/test_cuda_golden_%,qwen35 gemma4 nemotron_h)

.PHONY: cuda-host cuda-host-check
.SECONDARY: $(HC_CU) $(HC_CUH)
cuda-host: $(HC_DIR)/libstrata_cuda.so $(HC_TESTS) $(BUILD)/strata

cuda-host-check: cuda-host
	@BUILD=$(BUILD) CXX="$(CXX)" HC_FLAGS="$(HC_FLAGS)" tests/cuda-host/run.sh

$(HC_GEN)/%: kernels/cuda/% tests/cuda-host/hc_rewrite.py
	@mkdir -p $(dir $@)
	python3 tests/cuda-host/hc_rewrite.py $< $@

$(HC_GEN)/%.o: $(HC_GEN)/%.cu $(HC_CUH)
	$(CXX) $(HC_FLAGS) -MMD -MP -x c++ -c $< -o $@

$(HC_DIR)/rt/%.o: tests/cuda-host/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(HC_FLAGS) -MMD -MP -c $< -o $@

$(HC_DIR)/rt/%.o: engine/base/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -fPIC -c $< -o $@

$(HC_DIR)/libstrata_cuda.so: $(HC_OBJ)
	$(CXX) -shared -o $@ $^ -pthread -ldl

$(HC_DIR)/test_cuda_ops: $(wildcard tests/device/*ops*.c tests/device/*.h) tests/test_batch.h tests/test_kv.h \
                         $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $(filter %.c,$^) $(BUILD)/libstrata.a $(LDLIBS)

$(HC_DIR)/test_cuda_golden_%: tests/device/test_cuda_golden.c tests/unit/test_%_golden.c $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -Wno-missing-field-initializers -DGOLDEN_UNIT='"tests/unit/test_$*_golden.c"' \
	    -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)

$(HC_DIR)/test_cuda_engine: tests/device/test_cuda_engine.c tests/unit/test_engine.c $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)

$(HC_DIR)/test_cuda_quant_model: tests/device/test_cuda_quant_model.c tests/unit/test_quant_model.c \
                                 $(BUILD)/libstrata.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libstrata.a $(LDLIBS)

$(HC_DIR)/test_runtime: tests/cuda-host/test_runtime.cu $(HC_DIR)/libstrata_cuda.so
	@mkdir -p $(HC_DIR)/src/tests
	python3 tests/cuda-host/hc_rewrite.py $< $(HC_DIR)/src/tests/test_runtime.cu
	$(CXX) $(HC_FLAGS) -DSTRATA_CUDA_HOST -x c++ -o $@ $(HC_DIR)/src/tests/test_runtime.cu \
	    -x none $(HC_DIR)/libstrata_cuda.so -Wl,-rpath,'$$ORIGIN'

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# openapi_doc.c embeds server/openapi.json at assembly time, chat_page.c chat.html.
$(BUILD)/server/openapi_doc.o: server/openapi.json
$(BUILD)/server/chat_page.o: server/chat.html
