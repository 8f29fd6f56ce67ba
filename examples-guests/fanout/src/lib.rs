//! Fan-out: workflows that start one step per item and await them together
//! (`fan-out`) or take whichever finishes first (`first-of`).

use serde::{Deserialize, Serialize};
use stepstone_guest::{Error, Pending, Step, StepFailure, Workflow, export};

#[derive(Deserialize)]
struct Items {
    items: Vec<i64>,
}

#[derive(Serialize)]
struct Squares {
    squares: Vec<i64>,
    sum: i64,
}

#[derive(Serialize)]
struct First {
    /// Position in `items` of the step that finished first.
    index: usize,
    square: i64,
}

/// `{"items": [1, 2, 3]}` → `{"squares": [1, 4, 9], "sum": 14}`.
fn fan_out(ctx: &Workflow, input: Items) -> Result<Squares, Error> {
    let pending = start_squares(ctx, &input.items)?;
    let squares = ctx.all(pending).into_iter().collect::<Result<Vec<_>, _>>()?;
    let sum = squares
        .iter()
        .try_fold(0_i64, |sum, square| sum.checked_add(*square))
        .ok_or("the sum of the squares overflows an i64")?;
    Ok(Squares { squares, sum })
}

/// `{"items": [1, 2, 3]}` → e.g. `{"index": 0, "square": 1}`.
fn first_of(ctx: &Workflow, input: Items) -> Result<First, Error> {
    if input.items.is_empty() {
        return Err("first-of needs at least one item".into());
    }
    let mut pending = start_squares(ctx, &input.items)?;
    let (index, square) = ctx.any(&mut pending);
    Ok(First { index, square: square? })
}

fn start_squares(ctx: &Workflow, items: &[i64]) -> Result<Vec<Pending<i64>>, Error> {
    Ok(items
        .iter()
        .map(|item| ctx.start("square", item))
        .collect::<Result<_, _>>()?)
}

fn square(_ctx: &Step, n: i64) -> Result<i64, StepFailure> {
    n.checked_mul(n)
        .ok_or_else(|| StepFailure::permanent(format!("{n} squared overflows an i64")))
}

export! {
    workflows: {
        "fan-out" => fan_out,
        "first-of" => first_of,
    },
    steps: {
        "square" => square,
    },
}
