#!/usr/bin/env bash
# `cmake --install` of this build into <build>/sdk-prefix (the fixture of
# the example tests), then what a user gets there: every public header and
# no internal one, each header compiling on its own, the umbrella
# tributary.h, libtributary.{so,a} and the per-layer archives, the
# programs, and a first program linked four ways (pkg-config shared and
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
for f in rpc/base.h rpc/wire.h rpc/transport.h rpc/calls.h rpc/membership.h rpc/agent.h rpc/rref_internal.h tensor/ops_internal.h tensor/backend.h envs/builtin.h common; do
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
  [ "$h" = tributary.h ] || grep -qx "#include \"$h\"" "$inc/tributary.h" || fail "tributary.h misses $h"
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
