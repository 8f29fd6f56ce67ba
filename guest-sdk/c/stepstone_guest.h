// What steps and workflows in C share: the JSON text a function gets, the
// output buffer it writes, the table it is exported through, and the log.
// stepstone_steps.h and stepstone_workflows.h build the two worlds'
// exports on it; include one of them, not this.
//
// Every buffer is malloc'd, because the bindings free what an export
// returned once the host has copied it. Running out of memory traps.
#ifndef STEPSTONE_GUEST_H
#define STEPSTONE_GUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// JSON text, not NUL-terminated.
typedef struct {
  const char *json;
  size_t len;
} stepstone_input;

typedef struct {
  char *data;
  size_t len;
  size_t cap;
  bool failed;
  bool permanent;
} stepstone_output;

// A step or a workflow: reads its input, writes its output (JSON text).
typedef void (*stepstone_fn)(stepstone_input input, stepstone_output *out);

typedef struct {
  const char *name;
  stepstone_fn run;
} stepstone_export;

// Appends `len` bytes to the output.
void stepstone_write(stepstone_output *out, const char *bytes, size_t len);

// Appends a NUL-terminated string to the output.
void stepstone_print(stepstone_output *out, const char *text);

// Appends an unsigned number in decimal.
void stepstone_print_u64(stepstone_output *out, uint64_t number);

// Fails with `message` (replacing any output written). A step's permanent
// failure is not retried, whatever the caller's retry policy says; a
// workflow's failure ends its run either way.
void stepstone_fail(stepstone_output *out, const char *message, bool permanent);

// What was written so far, as an input to read (e.g. with stepstone_field).
stepstone_input stepstone_written(const stepstone_output *out);

// Frees the output's buffer and empties it.
void stepstone_output_free(stepstone_output *out);

// The value of member `key` of a JSON object, as JSON text, or {NULL, 0}
// when `object` is not an object or has no such member. The key is
// compared as written in the JSON (escapes are not decoded).
stepstone_input stepstone_field(stepstone_input object, const char *key);

typedef enum { STEPSTONE_TRACE, STEPSTONE_DEBUG, STEPSTONE_INFO, STEPSTONE_WARN, STEPSTONE_ERROR } stepstone_level;

// Writes a NUL-terminated line to the run's log (a step's is attributed
// to the step).
void stepstone_log(stepstone_level level, const char *message);

// For the world helpers: a malloc'd copy, never NULL (traps when out of
// memory).
void *stepstone_alloc(void *ptr, size_t size);

// For the world helpers: runs the function `name` of `table` (ended by
// {NULL, NULL}) on `input`, or fails permanently naming the unknown
// `what` (`step`, `workflow`).
void stepstone_dispatch(const stepstone_export *table, const char *what, stepstone_input name, stepstone_input input,
                        stepstone_output *out);

// For the world helpers: how many functions `table` exports.
size_t stepstone_count(const stepstone_export *table);

#endif
