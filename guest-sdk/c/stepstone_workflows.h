// Stepstone workflows in C: list your workflows in STEPSTONE_WORKFLOWS and
// this module implements the `workflows` world's exports (`describe`,
// `run`) over that table, on top of the bindings `wit-bindgen c --world
// workflows` generates.
//
// A workflow reads its input and writes its output like a step does (see
// stepstone_guest.h); a failure (stepstone_fail) fails the run with its
// message. It must reach the world only through the host's durable calls
// below, which the host journals and replays.
#ifndef STEPSTONE_WORKFLOWS_H
#define STEPSTONE_WORKFLOWS_H

#include "stepstone_guest.h"

typedef stepstone_fn stepstone_workflow_fn;
typedef stepstone_export stepstone_workflow;

// The component's workflows, ended by {NULL, NULL}: defined by the author.
extern const stepstone_workflow STEPSTONE_WORKFLOWS[];

// Retry and sandbox policy of a step call, as in the WIT `step-options`;
// a field left 0 takes the host's default.
typedef struct {
  uint32_t max_attempts;
  uint64_t initial_backoff_ms;
  double backoff_rate;
  uint64_t max_backoff_ms;
  uint64_t timeout_ms;
  uint64_t fuel;
} stepstone_step_options;

// Runs step `step` (`name`, or `component/name` for a step of the
// component linked to the run under that name, else the tenant's) on
// `input` under `options` (NULL: the host's defaults). Returns true with
// the step's output in `*result`; else false with `*result` failed with
// "step `STEP` KIND after N attempt(s): MESSAGE", so a workflow can pass
// the failure on with `*out = *result`. Free `*result` when done.
bool stepstone_call_step(const char *step, stepstone_input input, const stepstone_step_options *options,
                         stepstone_output *result);

// Appends `value` (JSON text) to the run's stream `name` (NUL-terminated,
// 1 to 128 letters, digits, `-`, `_` and `.`, not starting with `.`),
// which clients read live (`GET /v1/runs/{id}/streams/{name}`): a durable
// call, so a replay appends nothing twice.
void stepstone_append_to_stream(const char *name, stepstone_input value);

// Whether this run takes change `change_id` (NUL-terminated, 1 to 256
// bytes) of the workflow's code: a patch marker. True for a run that
// reaches the call on this build past its recorded history (the host
// journals a marker, once) or whose journal has the marker here; false for
// a run recorded by code before the change, which then replays as it ran.
// The first answer holds for the rest of the execution.
bool stepstone_patched(const char *change_id);

// Ends this run's journal and continues the same logical run as a new
// generation on `input` (JSON text), with an empty journal: how a loop
// that never ends keeps its journal small. Never returns: the host ends
// the instance at the call.
_Noreturn void stepstone_continue_as_new(stepstone_input input);

#endif
