// The `describe` export: what a component exports, by name. Shared by
// step.js and workflow.js so a component that has both lists both.

export function describeExport(workflows, steps) {
  return {
    describe() {
      return { workflows: Object.keys(workflows), steps: Object.keys(steps) };
    },
  };
}

// The text a failed workflow or step reports about a thrown value.
export function describeThrown(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
