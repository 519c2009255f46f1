/* The schema of the RL messages (rl/messages.h): one table per message,
 * one field descriptor per position of its list, and the one packer and
 * the one unpacker that walk them. A message's C struct, its wire form
 * (positions, kinds) and its checks are read from its table, so a new
 * field is one row here and in the struct; tests/rl/test_rl_messages.c
 * walks rl_msg_schemas and covers it with no edit.
 *
 * Wire: a message is a list whose item i is field i (RL_WIRE_LIST), or
 * the raw bytes of its C struct (RL_WIRE_BLOB: rl_update_stats). Errors:
 * the list's length or a field flagged RL_FF_LIST_KIND (every int, bool,
 * double, value, rref and array field) of the wrong kind gives
 * "<name>: expected (<desc>, <desc>, ...)"; then each field in order is
 * checked and named: "<name>: <field> ..." (RL_FF_BARE: "<field> ..."). */
#ifndef TRIB_RL_MESSAGE_SCHEMA_H
#define TRIB_RL_MESSAGE_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/rpc.h"

/* What an unpack checks the message against (the caller's run). */
struct rl_msg_expect {
    int rows;              /* RL_DIM_ROWS; < 0: any number >= 1 */
    int obs_dim, act_dim;  /* RL_DIM_OBS, RL_DIM_ACT */
    bool gaussian;         /* RL_WHEN_GAUSSIAN fields are present, else nil */
    bool value_head;       /* RL_WHEN_VALUE_HEAD fields are present, else nil */
};

enum rl_field_kind {
    RL_FK_INT,     /* RPC_INT into a C int or int64_t (size) */
    RL_FK_BOOL,    /* RPC_BOOL into a bool */
    RL_FK_DOUBLE,  /* RPC_DOUBLE (RL_WIRE_BLOB: the struct's bytes) into a double */
    RL_FK_VALUE,   /* a struct rpc_value of one of `kinds`, copied (RL_FF_BORROW: a const pointer into the args) */
    RL_FK_RREF,    /* RPC_RREF into a struct rref *, retained */
    RL_FK_TENSOR,  /* RPC_TENSOR into a struct tensor *, retained: f32 of shape `dims` */
    RL_FK_ARRAY,   /* RPC_BYTES: the int at count_off C elements of elem_size bytes */
    RL_FK_NESTED,  /* another message, inline in this struct at off */
};

/* A tensor's dimension: RL_DIM_N any >= 1, the others the expectation's. */
enum rl_dim { RL_DIM_NONE, RL_DIM_N, RL_DIM_ROWS, RL_DIM_OBS, RL_DIM_ACT };
/* When a tensor is on the wire: always, or only with the expectation's
 * flag (nil otherwise: "unexpected <field>"). */
enum rl_when { RL_WHEN_ALWAYS, RL_WHEN_GAUSSIAN, RL_WHEN_VALUE_HEAD };

#define RL_FF_LIST_KIND 0x01u   /* a tensor whose kind is checked with the list's length */
#define RL_FF_NIL_OK 0x02u      /* nil: absent (NULL tensor; nested: the bool at present_off false) */
#define RL_FF_BY_FLAG 0x04u     /* nested: on the wire (and read) only when the bool at present_off, an earlier
                                 * field, is true; nil otherwise, and whatever is there is ignored */
#define RL_FF_BARE 0x08u        /* its errors are not prefixed with the message's name */
#define RL_FF_FINITE 0x10u      /* a double, every double of an array, or every element of a tensor must be finite */
#define RL_FF_RANGE 0x20u       /* an int, or every int of an array, must be in lo..hi */
#define RL_FF_BORROW 0x40u      /* value: the struct holds a const struct rpc_value * into the args */
#define RL_FF_CPU 0x80u         /* tensor: on the CPU */
#define RL_FF_SCALAR 0x100u     /* tensor: one element, any shape ("must be one f32") */
#define RL_FF_COUNT_SET 0x200u  /* array: its count is an earlier array's (the same count_off): sizes must agree */

struct rl_msg_schema;

struct rl_field {
    const char *name;           /* in errors: "<message>: <name> ..." */
    const char *desc;           /* in the message's "expected (...)" list */
    enum rl_field_kind kind;
    size_t off;                 /* of the member in the message's struct */
    size_t size;                /* RL_FK_INT: sizeof the member (4 or 8) */
    unsigned flags;             /* RL_FF_* */
    int64_t lo, hi;             /* RL_FF_RANGE */
    unsigned kinds;             /* RL_FK_VALUE: 1u << each rpc_kind accepted */
    enum rl_dim dims[2];        /* RL_FK_TENSOR: its shape (RL_DIM_NONE past its last dimension) */
    enum rl_when when;          /* RL_FK_TENSOR */
    size_t present_off;         /* RL_FF_NIL_OK nested / RL_FF_BY_FLAG: the bool saying it is there */
    size_t count_off;           /* RL_FK_ARRAY: the int counting its elements */
    size_t elem_size;           /* RL_FK_ARRAY: sizeof(double) (RL_FF_FINITE) or sizeof(int) (RL_FF_RANGE) */
    int max_count;              /* RL_FK_ARRAY */
    const struct rl_msg_schema *nested;  /* RL_FK_NESTED */
    /* A bespoke check of this field once read (0, or -1 with rl_last_error()). */
    int (*check)(const struct rl_msg_schema *s, const struct rl_field *f, const void *msg);
};

enum rl_wire { RL_WIRE_LIST, RL_WIRE_BLOB };

struct rl_msg_schema {
    const char *name;           /* errors' prefix ("" for none) */
    enum rl_wire wire;
    size_t size;                /* sizeof its C struct */
    int n_fields;
    const struct rl_field *fields;
    /* Checks across fields, after every field is read (0, or -1 with rl_last_error()). */
    int (*check)(const struct rl_msg_schema *s, const void *msg);
};

/* Every message (nested ones too), NULL-terminated. */
extern const struct rl_msg_schema *const rl_msg_schemas[];

/* Packs *msg (a struct of the schema's). Tensors, RRefs, values are new references/copies. */
struct rpc_value rl_msg_pack(const struct rl_msg_schema *s, const void *msg);
/* Unpacks v into *msg (zeroed first), checking it all against x (may be
 * NULL when no field needs it). -1 with rl_last_error(), *msg then holding
 * nothing (zeroed). */
int rl_msg_unpack(const struct rl_msg_schema *s, const struct rpc_value *v, const struct rl_msg_expect *x, void *msg);
/* Releases what an unpacked or filled *msg holds (tensors, RRefs, copied
 * values, nested messages'), setting them NULL/nil and present flags false. */
void rl_msg_clear(const struct rl_msg_schema *s, void *msg);

#endif
