//! On-CPU and off-CPU never share a pprof. A pprof is made of a scope's profiles that
//! share period type, period, time window and attributes (`pprof_groups`: the sample
//! types of one pprof, as Go's CPU profile has `samples` and `cpu`). Both eBPF profilers
//! give off-CPU profiles no period type, so those groups already keep them apart from
//! CPU; a sender that gives an off-CPU profile the CPU profile's shape would have them
//! joined, so such a profile is moved into a scope of its own, which makes its own pprof.

use std::borrow::Cow;

use profcol_core::pdata::pprof::pprof_groups;
use profcol_core::pdata::{Dictionary, Profile, ProfileBatch, ResourceProfiles, ScopeProfiles};

/// Sample types of off-CPU profiles: the OTel eBPF profiler's and profcol's `off_cpu`,
/// Parca's agent's `wallclock`.
pub(crate) const OFF_CPU_TYPES: &[&str] = &["off_cpu", "wallclock"];

pub(crate) fn is_off_cpu(sample_type: &str) -> bool {
    OFF_CPU_TYPES.contains(&sample_type)
}

fn off_cpu_profile(d: &Dictionary, p: &Profile) -> bool {
    is_off_cpu(d.string(p.sample_type.type_strindex))
}

/// Whether a pprof of these profiles would hold off-CPU with another sample type (a
/// group never holds one sample type twice).
fn mixes(d: &Dictionary, profiles: &[Profile]) -> bool {
    pprof_groups(d, profiles).iter().any(|group| {
        group.len() > 1
            && group
                .iter()
                .any(|&i| profiles.get(i).is_some_and(|p| off_cpu_profile(d, p)))
    })
}

/// The scope as scopes that each make pprofs of one kind: the other profiles, then each
/// off-CPU profile alone.
fn split_scope(d: &Dictionary, sp: &ScopeProfiles) -> Vec<ScopeProfiles> {
    if !mixes(d, &sp.profiles) {
        return vec![sp.clone()];
    }
    let with = |profiles: Vec<Profile>| ScopeProfiles {
        scope: sp.scope.clone(),
        schema_url: sp.schema_url.clone(),
        profiles,
    };
    let (off_cpu, others): (Vec<&Profile>, Vec<&Profile>) =
        sp.profiles.iter().partition(|p| off_cpu_profile(d, p));
    std::iter::once(with(others.into_iter().cloned().collect()))
        .chain(off_cpu.into_iter().map(|p| with(vec![p.clone()])))
        .collect()
}

/// `batch` with every off-CPU profile that would share a pprof with another sample type
/// in a scope of its own; copied only when there is one.
pub(crate) fn separated(batch: &ProfileBatch) -> Cow<'_, ProfileBatch> {
    let d = batch.dictionary();
    let any = batch
        .resource_profiles()
        .iter()
        .flat_map(|rp| &rp.scope_profiles)
        .any(|sp| mixes(d, &sp.profiles));
    if !any {
        return Cow::Borrowed(batch);
    }
    let resources: Vec<ResourceProfiles> = batch
        .resource_profiles()
        .iter()
        .map(|rp| ResourceProfiles {
            resource: rp.resource.clone(),
            schema_url: rp.schema_url.clone(),
            scope_profiles: rp
                .scope_profiles
                .iter()
                .flat_map(|sp| split_scope(d, sp))
                .collect(),
        })
        .collect();
    let mut out = batch.clone();
    *out.resource_profiles_mut() = resources;
    Cow::Owned(out)
}
