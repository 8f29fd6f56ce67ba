//! What one execution of a run sees of its host, and no more: the limits
//! it runs under, the components its step calls may name, the part of the
//! host those calls use ([`StepHost`]), the steps in flight across
//! evictions, the runs' bells and their streams' readers' bells, the admission of children, and a way to
//! start them ([`ChildRuns`]). The execution's own (its records, its
//! components, its control, the tenant's step limits, origins and secrets)
//! is in [`RunContext`](super::RunContext).
//!
//! Invariant: an execution reaches the rest of the host only through this
//! struct, so what a workflow's host calls can touch is listed here.

use std::sync::Arc;

use super::children::ChildRuns;
use super::control::Controls;
use super::in_flight::InFlightSteps;
use super::step_host::StepHost;
use super::streams::StreamBells;
use crate::component::Components;
use crate::config::{RunLimits, WaitPolicy, WorkflowLimits};
use crate::policy::Admission;

/// The part of the host an execution of a run uses.
#[derive(Clone)]
pub struct ExecutionHost {
    pub(super) wait: WaitPolicy,
    pub(super) run_limits: RunLimits,
    pub(super) workflow_limits: WorkflowLimits,
    /// The tenant's components, which a step call may name.
    pub(super) components: Arc<Components>,
    pub(super) steps: Arc<StepHost>,
    pub(super) in_flight: Arc<InFlightSteps>,
    pub(super) controls: Arc<Controls>,
    /// Rung by each value appended, for the stream readers on this host.
    pub(super) stream_bells: Arc<StreamBells>,
    pub(super) admission: Arc<Admission>,
    pub(super) children: ChildRuns,
}
