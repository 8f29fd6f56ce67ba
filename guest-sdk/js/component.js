// A component with both workflows and steps (the `workflows-and-steps`
// world): `component({workflows: {...}, steps: {...}})` gives all three
// exports.

import { describeExport } from './describe.js';
import { stepExport } from './step.js';
import { workflowExport } from './workflow.js';

export function component({ workflows = {}, steps = {} }) {
  return { describe: describeExport(workflows, steps), workflow: workflowExport(workflows), step: stepExport(steps) };
}
