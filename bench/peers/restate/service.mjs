// The bench shapes as a Restate service, through @restatedev/restate-sdk as
// its documentation shows: `steps(n)` makes n calls of `ctx.run` one after
// another, each a trivial step (echo a number) whose result Restate journals
// before the handler goes on. Serves on the port given as the first argument.
import * as restate from "@restatedev/restate-sdk";

const bench = restate.service({
  name: "Bench",
  handlers: {
    steps: async (ctx, n) => {
      let sum = 0;
      for (let i = 0; i < n; i++) {
        sum += await ctx.run("noop", () => i);
      }
      return sum;
    },
  },
});

const port = Number(process.argv[2]);
restate.endpoint().bind(bench).listen(port);
