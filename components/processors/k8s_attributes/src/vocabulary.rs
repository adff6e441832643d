//! The names `extract.metadata` accepts, and other attribute and annotation names.

/// One `extract.metadata` name; each is also the attribute it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metadata {
    NamespaceName,
    PodName,
    PodUid,
    PodHostname,
    PodStartTime,
    PodIp,
    DeploymentName,
    DeploymentUid,
    ReplicaSetName,
    ReplicaSetUid,
    DaemonSetName,
    DaemonSetUid,
    StatefulSetName,
    StatefulSetUid,
    JobName,
    JobUid,
    CronJobName,
    CronJobUid,
    NodeName,
    NodeUid,
    ClusterUid,
    ContainerName,
    ContainerId,
    ContainerImageName,
    ContainerImageTag,
    ContainerImageRepoDigests,
    ServiceNamespace,
    ServiceName,
    ServiceVersion,
    ServiceInstanceId,
}

impl Metadata {
    pub const ALL: [Metadata; 30] = [
        Metadata::NamespaceName,
        Metadata::PodName,
        Metadata::PodUid,
        Metadata::PodHostname,
        Metadata::PodStartTime,
        Metadata::PodIp,
        Metadata::DeploymentName,
        Metadata::DeploymentUid,
        Metadata::ReplicaSetName,
        Metadata::ReplicaSetUid,
        Metadata::DaemonSetName,
        Metadata::DaemonSetUid,
        Metadata::StatefulSetName,
        Metadata::StatefulSetUid,
        Metadata::JobName,
        Metadata::JobUid,
        Metadata::CronJobName,
        Metadata::CronJobUid,
        Metadata::NodeName,
        Metadata::NodeUid,
        Metadata::ClusterUid,
        Metadata::ContainerName,
        Metadata::ContainerId,
        Metadata::ContainerImageName,
        Metadata::ContainerImageTag,
        Metadata::ContainerImageRepoDigests,
        Metadata::ServiceNamespace,
        Metadata::ServiceName,
        Metadata::ServiceVersion,
        Metadata::ServiceInstanceId,
    ];

    /// contrib's default `extract.metadata`.
    pub const DEFAULTS: [Metadata; 6] = [
        Metadata::NamespaceName,
        Metadata::PodName,
        Metadata::PodUid,
        Metadata::PodStartTime,
        Metadata::DeploymentName,
        Metadata::NodeName,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metadata::NamespaceName => "k8s.namespace.name",
            Metadata::PodName => "k8s.pod.name",
            Metadata::PodUid => "k8s.pod.uid",
            Metadata::PodHostname => "k8s.pod.hostname",
            Metadata::PodStartTime => "k8s.pod.start_time",
            Metadata::PodIp => "k8s.pod.ip",
            Metadata::DeploymentName => "k8s.deployment.name",
            Metadata::DeploymentUid => "k8s.deployment.uid",
            Metadata::ReplicaSetName => "k8s.replicaset.name",
            Metadata::ReplicaSetUid => "k8s.replicaset.uid",
            Metadata::DaemonSetName => "k8s.daemonset.name",
            Metadata::DaemonSetUid => "k8s.daemonset.uid",
            Metadata::StatefulSetName => "k8s.statefulset.name",
            Metadata::StatefulSetUid => "k8s.statefulset.uid",
            Metadata::JobName => "k8s.job.name",
            Metadata::JobUid => "k8s.job.uid",
            Metadata::CronJobName => "k8s.cronjob.name",
            Metadata::CronJobUid => "k8s.cronjob.uid",
            Metadata::NodeName => "k8s.node.name",
            Metadata::NodeUid => "k8s.node.uid",
            Metadata::ClusterUid => "k8s.cluster.uid",
            Metadata::ContainerName => "k8s.container.name",
            Metadata::ContainerId => "container.id",
            Metadata::ContainerImageName => "container.image.name",
            Metadata::ContainerImageTag => "container.image.tag",
            Metadata::ContainerImageRepoDigests => "container.image.repo_digests",
            Metadata::ServiceNamespace => "service.namespace",
            Metadata::ServiceName => "service.name",
            Metadata::ServiceVersion => "service.version",
            Metadata::ServiceInstanceId => "service.instance.id",
        }
    }

    pub fn parse(name: &str) -> Option<Metadata> {
        Metadata::ALL.iter().copied().find(|m| m.as_str() == name)
    }
}

/// Incoming attributes that pick the container of a matched pod.
pub const K8S_CONTAINER_RESTART_COUNT: &str = "k8s.container.restart_count";

/// Pod annotations under this prefix name resource attributes (semantic conventions).
pub const OTEL_ANNOTATION_PREFIX: &str = "resource.opentelemetry.io/";

/// Well-known labels used for service.* (semantic conventions, k8s attributes).
pub const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_APP_VERSION: &str = "app.kubernetes.io/version";
/// The ReplicaSet's hash, on its pods and in its name.
pub const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// The namespace whose uid stands for the cluster's (`k8s.cluster.uid`).
pub const CLUSTER_UID_NAMESPACE: &str = "kube-system";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_fits_the_bit_set() {
        for m in Metadata::ALL {
            assert_eq!(Metadata::parse(m.as_str()), Some(m));
            assert!((m as u64) < 64);
        }
        assert_eq!(Metadata::parse("k8s.pod.labels"), None);
    }
}
