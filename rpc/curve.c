/* Optional CURVE encryption (DESIGN.md §4.2): the router is a CURVE server,
 * dealers are CURVE clients, and a ZAP handler on the I/O thread admits only
 * clients whose public key is on the allow-list. */
#include <string.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

static struct rpc_agent *const A = &rpc_agent_state;

static bool z85_key(const char *k, uint8_t out[32])
{
    return k && strlen(k) == 40 && zmq_z85_decode(out, k) != NULL;
}

int rpc_curve_setup(void)
{
    const struct rpc_opts *o = &A->opts;
    if (!o->curve) return 0;
    if (!zmq_has("curve")) return rpc_set_error("rpc_init: this libzmq has no CURVE support");
    uint8_t bin[32];
    if (!z85_key(o->curve_public_key, bin) || !z85_key(o->curve_secret_key, bin))
        return rpc_set_error("rpc_init: curve needs a Z85 public and secret key (40 characters each)");
    snprintf(A->curve_public, sizeof A->curve_public, "%s", o->curve_public_key);
    snprintf(A->curve_secret, sizeof A->curve_secret, "%s", o->curve_secret_key);
    const char *server = o->curve_server_key ? o->curve_server_key : o->curve_public_key;
    if (!z85_key(server, bin)) return rpc_set_error("rpc_init: bad curve server key '%s'", server);
    snprintf(A->curve_server, sizeof A->curve_server, "%s", server);
    A->n_allow = 0;
    if (o->curve_allow) {
        for (const char *const *k = o->curve_allow; *k; k++) {
            if (A->n_allow == RPC_CURVE_MAX_ALLOW) return rpc_set_error("rpc_init: more than %d allowed keys", RPC_CURVE_MAX_ALLOW);
            if (!z85_key(*k, A->allow[A->n_allow])) return rpc_set_error("rpc_init: bad allowed key '%s'", *k);
            A->n_allow++;
        }
    } else {
        z85_key(o->curve_public_key, A->allow[0]);
        A->n_allow = 1;
    }
    /* ZAP: libzmq asks this socket (in our context) about every handshake. */
    A->zap = zmq_socket(A->zctx, ZMQ_REP);
    CHECK(A->zap != NULL);
    int zero = 0;
    ZMQ_CHECK(zmq_setsockopt(A->zap, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_bind(A->zap, "inproc://zeromq.zap.01"));
    return 0;
}

void rpc_curve_server(void *sock)
{
    if (!A->opts.curve) return;
    int one = 1;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, A->curve_secret, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "tributary", 9));
}

void rpc_curve_client(void *sock)
{
    if (!A->opts.curve) return;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, A->curve_server, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, A->curve_public, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, A->curve_secret, 40));
}

/* I/O thread: answers pending ZAP requests (RFC 27): frames version,
 * request id, domain, address, identity, mechanism, client key. */
void rpc_curve_zap(void)
{
    for (;;) {
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            ZMQ_CHECK(zmq_msg_init(&m));
            if (zmq_msg_recv(&m, A->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                ZMQ_CHECK(zmq_msg_close(&m));
                CHECK(n == 0);
                return;
            }
            more = zmq_msg_more(&m);
            if (n < 8) f[n++] = m;
            else ZMQ_CHECK(zmq_msg_close(&m));
        }
        bool ok = false;
        if (n == 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
            zmq_msg_size(&f[6]) == 32)
            for (int i = 0; i < A->n_allow && !ok; i++) ok = memcmp(zmq_msg_data(&f[6]), A->allow[i], 32) == 0;
        const char *status = ok ? "200" : "400", *text = ok ? "OK" : "key not allowed";
        ZMQ_CHECK(zmq_send(A->zap, "1.0", 3, ZMQ_SNDMORE));
        if (n >= 2) ZMQ_CHECK(zmq_send(A->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE));
        else ZMQ_CHECK(zmq_send(A->zap, "", 0, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(A->zap, status, 3, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(A->zap, text, strlen(text), ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(A->zap, "", 0, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(A->zap, "", 0, 0));
        for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&f[i]));
    }
}
