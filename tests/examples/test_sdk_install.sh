#!/usr/bin/env bash
# `cmake --install` of this build into <build>/sdk-prefix (the fixture of
# the example tests), then what a user gets there: every public header and
# no internal one, each header compiling on its own, the umbrella
# tributary.h, libtributary.{so,a} and the per-layer archives, the
# programs, an env plug-in built with find_package(Tributary) and
# Tributary::envs where the CUDA toolkit is not found, and a first program
# linked four ways (pkg-config shared and
# static, find_package with Tributary::tributary and with Tributary::rpc)
# that runs an RPC world. libtributary.so exports exactly the functions the
# public headers declare (cmake/tributary.map, current with the headers).
. "$(dirname "$0")/sdk_lib.sh"
rm -rf "$prefix"
"$CMAKE" --install "$bin" --prefix "$prefix" >"$work/install.out" 2>&1 || fail "cmake --install"

inc=$prefix/include/tributary
for f in tributary.h tensor/tensor.h tensor/dtype.h tensor/autograd.h tensor/ops.h tensor/nn.h \
         envs/env.h envs/vec_env.h envs/plugin.h rpc/rpc.h rpc/dist_autograd.h rpc/remote_module.h \
         rpc/placement.h optim/optim.h optim/dist_optim.h optim/dist_ckpt.h; do
  [ -f "$inc/$f" ] || fail "not installed: include/tributary/$f"
done
for f in rpc/base.h rpc/wire.h rpc/transport.h rpc/calls.h rpc/membership.h rpc/rpc_agent.h rpc/rrefs.h tensor/ops_internal.h tensor/backend.h envs/builtin.h common; do
  [ -e "$inc/$f" ] && fail "internal header installed: $f"
done
for f in lib/libtributary.so lib/libtributary.a lib/libtrib_tensor.a lib/libtrib_rpc.a lib/libtrib_optim.a \
         lib/libtrib_dist_optim.a lib/libtrib_envs.a lib/pkgconfig/tributary.pc \
         lib/cmake/Tributary/tributary-config.cmake bin/tributary-agent bin/tributary-observer \
         bin/tributary-train bin/tributary-eval bin/trib-env; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
# With the CUDA backend, its runtime, cuBLAS and libstdc++ travel with the library.
case ${TRIB_CUDA:-OFF} in
  ON|1|TRUE|YES|on|true|yes)
    [ -e "$prefix/lib/libtrib_tensor_cuda.a" ] || fail "not installed: lib/libtrib_tensor_cuda.a"
    libs=$(pkg-config --static --libs tributary)
    for l in -lcudart -lcublas -lstdc++; do
      case " $libs " in *" $l "*) ;; *) fail "pkg-config --static --libs tributary lacks $l: $libs" ;; esac
    done
    ldd "$prefix/lib/libtributary.so" >"$work/ldd.out" 2>&1
    grep -q 'libcudart' "$work/ldd.out" && grep -q 'libcublas' "$work/ldd.out" && ! grep -q 'not found' "$work/ldd.out" ||
      fail "libtributary.so's CUDA libraries: $(cat "$work/ldd.out")" ;;
esac
"$prefix/bin/tributary-train" --help >"$work/help.out" 2>&1 || fail "installed tributary-train --help"

# Every installed header compiles on its own, and the umbrella includes them all.
for h in $(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
  echo "#include \"$h\"" | "$CC" -fsyntax-only -Wall -Wextra -Werror $(pkg-config --cflags tributary) -x c - \
    >"$work/header.out" 2>&1 || fail "$h does not compile on its own"
  # envs/mujoco_sdk.h and mujoco_env.h (with MuJoCo only) stay out of the umbrella, which needs no MuJoCo
  [ "$h" = tributary.h ] || [ "$h" = envs/mujoco_sdk.h ] || [ "$h" = envs/mujoco_env.h ] || grep -qx "#include \"$h\"" "$inc/tributary.h" ||
    fail "tributary.h misses $h"
done

# A first program: two processes, one rpc_sync and a remote tensor.
cat >"$work/first.c" <<'C'
#include <stdio.h>
#include "tributary.h"
static int echo(struct rpc_request *q, const struct rpc_value *a, struct rpc_value *r, void *u)
{ *r = rpc_value_copy(&a->list.items[0]); return 0; }
static int run(int rank, int world, const char *master, void *arg)
{
    rpc_register("echo", echo, NULL);
    remote_module_init();   /* the owner side of rpc_tensor_to */
    struct rpc_opts o = { .name = rank ? "w1" : "w0", .rank = rank, .world_size = world, .master = master };
    if (rpc_init(&o) != 0) return 1;
    int rc = 0;
    if (rank == 0) {
        struct rpc_value a = rpc_list(1), r = rpc_nil();
        a.list.items[0] = rpc_int(41);
        rc = rpc_sync("w1", "echo", &a, &r, 0) == 0 && r.kind == RPC_INT && r.i == 41 ? 0 : 1;
        struct tensor *t = tensor_scalar_f32(2.5f);
        struct rref *rr = rpc_tensor_to("w1/cpu", t);
        struct rpc_value back = rpc_nil();
        if (!rr || rref_to_here(rr, &back, 0) != 0 || rref_owner(rr) != 1 || tensor_f32(back.tensor)[0] != 2.5f) rc = 1;
        printf("echo %lld, remote tensor %s\n", (long long)r.i, rc ? "bad" : "ok");
        rpc_value_clear(&back); rref_free(rr); tensor_free(t);
        rpc_value_clear(&a); rpc_value_clear(&r);
    }
    rpc_shutdown(true);
    return rc;
}
int main(void) { return rpc_spawn(2, run, NULL, 60) == 0 ? 0 : (fprintf(stderr, "%s\n", rpc_last_error()), 1); }
C
expect="echo 41, remote tensor ok"
"$CC" "$work/first.c" $(pkg-config --cflags --libs tributary) -o "$work/first_pc" >"$work/first.out" 2>&1 ||
  fail "cc first.c \$(pkg-config --cflags --libs tributary)"
[ "$(timeout 60 "$work/first_pc")" = "$expect" ] || fail "first_pc"
"$CC" "$work/first.c" $(pkg-config --cflags tributary) "$prefix/lib/libtributary.a" \
  $(pkg-config --static --libs tributary | sed 's/ -ltributary / /') -o "$work/first_static" >"$work/first.out" 2>&1 ||
  fail "static link against libtributary.a with pkg-config --static"
[ "$(timeout 60 "$work/first_static")" = "$expect" ] || fail "first_static"
ldd "$work/first_static" | grep -q libtributary && fail "first_static loads libtributary.so"
mkdir -p "$work/cm"
for tgt in tributary rpc; do
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(first C)\nfind_package(Tributary REQUIRED)\nadd_executable(first %s/first.c)\ntarget_link_libraries(first PRIVATE Tributary::%s)\n' \
    "$work" $tgt >"$work/cm/CMakeLists.txt"
  rm -rf "$work/cm/b"
  "$CMAKE" -S "$work/cm" -B "$work/cm/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" >"$work/first.out" 2>&1 &&
    "$CMAKE" --build "$work/cm/b" >>"$work/first.out" 2>&1 || fail "find_package(Tributary) with Tributary::$tgt"
  [ "$(timeout 60 "$work/cm/b/first")" = "$expect" ] || fail "first with Tributary::$tgt"
done
# An env plug-in on a machine without the CUDA toolkit (simulated: CMake's
# find_package(CUDAToolkit) disabled, nvcc off PATH): find_package(Tributary)
# still succeeds, naming the targets that need CUDA when this build has it,
# and Tributary::envs builds a plug-in and a host. pkg-config's Cflags carry
# no define (no installed header reads one), and tributary-envs.pc gives the
# env API alone: libtrib_envs.a, never CUDA.
mkdir -p "$work/nocuda"
cat >"$work/nocuda/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.16)
project(nocuda C)
find_package(Tributary REQUIRED)
add_library(point_reach MODULE $src/envs/examples/point_reach.c)
target_link_libraries(point_reach PRIVATE Tributary::envs m)
add_executable(point_reach_run $src/envs/examples/run_point_reach.c)
target_link_libraries(point_reach_run PRIVATE Tributary::envs)
message(STATUS "Tributary_CUDA_FOUND=\${Tributary_CUDA_FOUND}")
CM
nocuda_path=$(echo "$PATH" | tr : '\n' | grep -v cuda | paste -sd:)
env -u CUDACXX -u CUDA_PATH -u CUDAToolkit_ROOT PATH="$nocuda_path" "$CMAKE" -S "$work/nocuda" -B "$work/nocuda/b" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$CC" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON \
  >"$work/nocuda.out" 2>&1 && "$CMAKE" --build "$work/nocuda/b" >>"$work/nocuda.out" 2>&1 ||
  fail "find_package(Tributary) + Tributary::envs without the CUDA toolkit"
grep -q "Tributary_CUDA_FOUND=FALSE" "$work/nocuda.out" || fail "Tributary_CUDA_FOUND is not FALSE without the toolkit"
case ${TRIB_CUDA:-OFF} in
  ON|1|TRUE|YES|on|true|yes)
    grep -q "Tributary: the CUDA toolkit is not found, so Tributary::tributary, Tributary::tributary_static, .*Tributary::tensor_cuda.* cannot be linked here" "$work/nocuda.out" ||
      fail "find_package(Tributary) does not say which targets need CUDA" ;;
esac
case "$(timeout 60 "$work/nocuda/b/point_reach_run" "$work/nocuda/b/libpoint_reach.so")" in
  '{"env":"PointReach-v0","episodes":'*) ;; *) fail "point_reach_run built without the CUDA toolkit" ;;
esac
case " $(pkg-config --cflags tributary) $(pkg-config --cflags tributary-envs) " in
  *" -D"*) fail "pkg-config --cflags carries a define: $(pkg-config --cflags tributary)" ;;
esac
"$CC" "$src/envs/examples/run_point_reach.c" $(pkg-config --cflags --libs tributary-envs) -o "$work/envs_run" >"$work/envs_pc.out" 2>&1 ||
  fail "cc run_point_reach.c \$(pkg-config --cflags --libs tributary-envs)"
case " $(pkg-config --libs --static tributary-envs) " in *" -lcudart "*|*" -lcublas "*|*" -lstdc++ "*) fail "tributary-envs.pc links CUDA" ;; esac
case "$(timeout 60 "$work/envs_run" "$work/nocuda/b/libpoint_reach.so")" in
  '{"env":"PointReach-v0","episodes":'*) ;; *) fail "run_point_reach linked with tributary-envs.pc" ;;
esac
# With MuJoCo, envs/ links it: both .pc files and the CMake package carry it.
case ${TRIB_WITH_MUJOCO:-OFF} in
  ON|1|TRUE|YES|on|true|yes)
    for pc in tributary tributary-envs; do
      case " $(pkg-config --static --libs $pc) " in *" -lmujoco "*) ;; *) fail "pkg-config --static --libs $pc lacks -lmujoco" ;; esac
    done
    [ -f "$inc/envs/mujoco_sdk.h" ] || fail "not installed: include/tributary/envs/mujoco_sdk.h"
    [ -f "$inc/envs/mujoco_env.h" ] || fail "not installed: include/tributary/envs/mujoco_env.h"
    # The MuJoCo env kit's examples, built out of tree against the installed
    # headers alone (pkg-config's tributary-envs; libmujoco, nothing of
    # Tributary linked), run by the installed trib-env: MjHopper-v0 with the
    # built-in's model steps as Hopper-v4 (the same episodes from one seed).
    for ex in mj_pendulum mj_hopper; do
      (cd "$work" && "$CC" -shared -fPIC -std=gnu11 -ffp-contract=off $(pkg-config --cflags tributary-envs) \
        "$src/envs/examples/$ex.c" -o "$work/lib$ex.so" -lmujoco -lm) >"$work/kit.out" 2>&1 ||
        fail "cc -shared \$(pkg-config --cflags tributary-envs) envs/examples/$ex.c -lmujoco"
      deps=$("$CC" -M -std=gnu11 $(pkg-config --cflags tributary-envs) "$src/envs/examples/$ex.c" 2>&1)
      case "$deps" in *"$src/envs/mujoco_env.h"*|*"$src/envs/env.h"*) fail "envs/examples/$ex.c built against the source tree's headers" ;;
                      *mujoco_env.h*) ;; *) fail "envs/examples/$ex.c did not include the installed envs/mujoco_env.h" ;; esac
    done
    # docs/sdk.md's walk through MjHopper-v0 quotes the file it built: each
    # C block of its "A new robot" section is in envs/examples/mj_hopper.c as it stands.
    python3 - "$src/docs/sdk.md" "$src/envs/examples/mj_hopper.c" >"$work/walk.out" 2>&1 <<'PY' ||
import re, sys
doc, code = (open(p).read() for p in sys.argv[1:])
walk = doc.split("### A new robot", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```c\n(.*?)```", walk, re.S)
bad = [b for b in blocks if b not in code]
print(f"{len(blocks)} blocks, {len(bad)} not in mj_hopper.c:", *bad, sep="\n")
sys.exit(1 if bad or len(blocks) < 4 else 0)
PY
      fail "docs/sdk.md's walk-through quotes what envs/examples/mj_hopper.c no longer says"
    case "$(timeout 60 "$prefix/bin/trib-env" --json -e 3 "$work/libmj_pendulum.so")" in
      '{"env":"MjPendulum-v0","num_envs":1,"seed":0,"episodes":3,'*) ;; *) fail "installed trib-env on libmj_pendulum.so" ;;
    esac
    kit=$(timeout 60 "$prefix/bin/trib-env" --json -e 5 -s 2 --env-arg "model=$src/envs/mujoco/models/hopper.xml" "$work/libmj_hopper.so")
    builtin=$(timeout 60 "$prefix/bin/trib-env" --json -e 5 -s 2 Hopper-v4)
    case "$kit" in '{"env":"MjHopper-v0","num_envs":1,"seed":2,"episodes":5,'*) ;; *) fail "installed trib-env on libmj_hopper.so: $kit" ;; esac
    [ "$(sed 's/.*"num_envs"//; s/"steps_per_s".*//' <<<"$kit")" = "$(sed 's/.*"num_envs"//; s/"steps_per_s".*//' <<<"$builtin")" ] ||
      fail "MjHopper-v0 built against the SDK is not Hopper-v4: $kit / $builtin"
    grep -q "find_dependency(mujoco)" "$prefix/lib/cmake/Tributary/tributary-config.cmake" ||
      grep -q "IMPORTED_TARGET mujoco" "$prefix/lib/cmake/Tributary/tributary-config.cmake" ||
      fail "tributary-config.cmake does not find MuJoCo" ;;
esac

# The exports: the version script is current with the public headers, and
# the installed library exports its names and nothing else (no internals
# such as rpc_out_push or tensor_make for a program to bind to).
"$src/scripts/gen-exports" --check >"$work/exports.out" 2>&1 || fail "cmake/tributary.map is stale (run scripts/gen-exports)"
sed -nE 's/^    ([A-Za-z_][A-Za-z0-9_]*);$/\1/p' "$src/cmake/tributary.map" | sort >"$work/map.txt"
[ "$(wc -l <"$work/map.txt")" -gt 200 ] || fail "cmake/tributary.map lists $(wc -l <"$work/map.txt") functions"
nm -D --defined-only --without-symbol-versions "$prefix/lib/libtributary.so" | awk '$2 != "A" { print $3 }' | sort >"$work/exported.txt"
diff "$work/map.txt" "$work/exported.txt" >"$work/exports.out" 2>&1 ||
  fail "libtributary.so exports other names than cmake/tributary.map (< map only, > exported only)"
echo "ok: SDK installed in $prefix"
