//! The catalogue of yaook's scheduling keys, with their exact label keys.

use std::fmt;
use std::str::FromStr;

macro_rules! catalogue {
    ($( $(#[$doc:meta])* $variant:ident = $py:literal => $value:literal, group: $group:expr; )*) => {
        /// The scheduling keys used by yaook's operators, each a node label key and taint key.
        ///
        /// [`as_str`](Self::as_str) gives the label key (`compute.yaook.cloud/api`),
        /// [`python_name`](Self::python_name) yaook's enum member name (`COMPUTE_API`).
        /// Both parse back with [`FromStr`].
        ///
        /// Keys that yaook's later docs mention without a value (the Neutron OVN agent, the
        /// BGP agents) are not listed; use any valid label key with
        /// [`SchedulingKeys::new`](super::SchedulingKeys::new) for those.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum SchedulingKey {
            $( $(#[$doc])* $variant, )*
        }

        impl SchedulingKey {
            /// Every key of the catalogue, in yaook's documentation order.
            pub const ALL: &'static [SchedulingKey] = &[ $( SchedulingKey::$variant, )* ];

            /// The label (and taint) key, e.g. `compute.yaook.cloud/api`.
            pub const fn as_str(self) -> &'static str {
                match self { $( SchedulingKey::$variant => $value, )* }
            }

            /// yaook's name for the key, e.g. `COMPUTE_API`.
            pub const fn python_name(self) -> &'static str {
                match self { $( SchedulingKey::$variant => $py, )* }
            }

            /// The group key that the catalogue describes as covering this key (for example
            /// [`AnyApi`](Self::AnyApi) for every API service, [`OperatorAny`](Self::OperatorAny)
            /// for every operator), if there is one. Read from the catalogue's descriptions
            /// ("used to schedule any of the …").
            pub const fn group(self) -> Option<SchedulingKey> {
                match self { $( SchedulingKey::$variant => $group, )* }
            }
        }
    };
}

use SchedulingKey as K;

catalogue! {
    /// Any of the yaook operator Jobs.
    OperatorAny = "OPERATOR_ANY" => "operator.yaook.cloud/any", group: None;
    /// The barbican operator's Jobs.
    OperatorBarbican = "OPERATOR_BARBICAN" => "operator.yaook.cloud/barbican", group: Some(K::OperatorAny);
    /// The cinder operator's Jobs.
    OperatorCinder = "OPERATOR_CINDER" => "operator.yaook.cloud/cinder", group: Some(K::OperatorAny);
    /// The ConfiguredDaemonSet operator.
    OperatorConfiguredDaemonSet = "OPERATOR_CONFIGURED_DAEMON_SET" => "operator.yaook.cloud/configured-daemon-set", group: Some(K::OperatorAny);
    /// The glance operator's Jobs.
    OperatorGlance = "OPERATOR_GLANCE" => "operator.yaook.cloud/glance", group: Some(K::OperatorAny);
    /// The heat operator's Jobs.
    OperatorHeat = "OPERATOR_HEAT" => "operator.yaook.cloud/heat", group: Some(K::OperatorAny);
    /// The keystone operator's Jobs.
    OperatorKeystone = "OPERATOR_KEYSTONE" => "operator.yaook.cloud/keystone", group: Some(K::OperatorAny);
    /// The neutron operator's Jobs.
    OperatorNeutron = "OPERATOR_NEUTRON" => "operator.yaook.cloud/neutron", group: Some(K::OperatorAny);
    /// The nova operator's Jobs.
    OperatorNova = "OPERATOR_NOVA" => "operator.yaook.cloud/nova", group: Some(K::OperatorAny);
    /// The gnocchi operator's Jobs.
    OperatorGnocchi = "OPERATOR_GNOCCHI" => "operator.yaook.cloud/gnocchi", group: Some(K::OperatorAny);
    /// The ceilometer operator's Jobs.
    OperatorCeilometer = "OPERATOR_CEILOMETER" => "operator.yaook.cloud/ceilometer", group: Some(K::OperatorAny);
    /// Any infrastructure component.
    AnyInfra = "ANY_INFRA" => "infra.yaook.cloud/any", group: None;
    /// Database services.
    InfraDatabase = "INFRA_DATABASE" => "infra.yaook.cloud/db", group: Some(K::AnyInfra);
    /// Message-queue services.
    InfraMessageQueue = "INFRA_MESSAGE_QUEUE" => "infra.yaook.cloud/mq", group: Some(K::AnyInfra);
    /// Any OpenStack API Deployment.
    AnyApi = "ANY_API" => "any.yaook.cloud/api", group: None;
    /// cinder-api.
    BlockStorageApi = "BLOCK_STORAGE_API" => "block-storage.yaook.cloud/api", group: Some(K::AnyApi);
    /// glance-api.
    ImageApi = "IMAGE_API" => "image.yaook.cloud/api", group: Some(K::AnyApi);
    /// keystone-api.
    IdentityApi = "IDENTITY_API" => "identity.yaook.cloud/api", group: Some(K::AnyApi);
    /// neutron-api.
    NetworkApi = "NETWORK_API" => "network.yaook.cloud/api", group: Some(K::AnyApi);
    /// nova-api.
    ComputeApi = "COMPUTE_API" => "compute.yaook.cloud/api", group: Some(K::AnyApi);
    /// nova-metadata-api.
    ComputeMetadataApi = "COMPUTE_METADATA_API" => "compute.yaook.cloud/metadata-api", group: Some(K::AnyApi);
    /// barbican-api.
    KeyManagerApi = "KEY_MANAGER_API" => "key-manager.yaook.cloud/api", group: Some(K::AnyApi);
    /// placement-api.
    PlacementApi = "PLACEMENT_API" => "placement.yaook.cloud/api", group: Some(K::AnyApi);
    /// gnocchi-api.
    GnocchiApi = "GNOCCHI_API" => "gnocchi.yaook.cloud/api", group: Some(K::AnyApi);
    /// Any barbican supporting service.
    KeyManagerBarbicanAnyService = "KEY_MANAGER_BARBICAN_ANY_SERVICE" => "key-manager.yaook.cloud/barbican-any-service", group: None;
    /// barbican-keystone-listener.
    KeyManagerBarbicanKeystoneListener = "KEY_MANAGER_BARBICAN_KEYSTONE_LISTENER" => "key-manager.yaook.cloud/barbican-keystone-listener", group: Some(K::KeyManagerBarbicanAnyService);
    /// Any cinder supporting service (backup, volume, scheduler).
    BlockStorageCinderAnyService = "BLOCK_STORAGE_CINDER_ANY_SERVICE" => "block-storage.yaook.cloud/cinder-any-service", group: None;
    /// cinder-backup.
    BlockStorageCinderBackup = "BLOCK_STORAGE_CINDER_BACKUP" => "block-storage.yaook.cloud/cinder-backup", group: Some(K::BlockStorageCinderAnyService);
    /// cinder-scheduler.
    BlockStorageCinderScheduler = "BLOCK_STORAGE_CINDER_SCHEDULER" => "block-storage.yaook.cloud/cinder-scheduler", group: Some(K::BlockStorageCinderAnyService);
    /// cinder-volume.
    BlockStorageCinderVolume = "BLOCK_STORAGE_CINDER_VOLUME" => "block-storage.yaook.cloud/cinder-volume", group: Some(K::BlockStorageCinderAnyService);
    /// Any nova supporting service (conductor, scheduler).
    ComputeNovaAnyService = "COMPUTE_NOVA_ANY_SERVICE" => "compute.yaook.cloud/nova-any-service", group: None;
    /// nova-conductor.
    ComputeNovaConductor = "COMPUTE_NOVA_CONDUCTOR" => "compute.yaook.cloud/nova-conductor", group: Some(K::ComputeNovaAnyService);
    /// nova-scheduler.
    ComputeNovaScheduler = "COMPUTE_NOVA_SCHEDULER" => "compute.yaook.cloud/nova-scheduler", group: Some(K::ComputeNovaAnyService);
    /// The neutron L2 agent (see [`SchedulingKeys::neutron_l2_agent`](super::SchedulingKeys::neutron_l2_agent)).
    NetworkNeutronL2Agent = "NETWORK_NEUTRON_L2_AGENT" => "network.yaook.cloud/neutron-l2-agent", group: None;
    /// The neutron L3 agent.
    NetworkNeutronL3Agent = "NETWORK_NEUTRON_L3_AGENT" => "network.yaook.cloud/neutron-l3-agent", group: None;
    /// The neutron DHCP agent.
    NetworkNeutronDhcpAgent = "NETWORK_NEUTRON_DHCP_AGENT" => "network.yaook.cloud/neutron-dhcp-agent", group: None;
    /// nova-compute and libvirt.
    ComputeHypervisor = "COMPUTE_HYPERVISOR" => "compute.yaook.cloud/hypervisor", group: None;
    /// gnocchi-metricd.
    GnocchiMetricd = "GNOCCHI_METRICD" => "gnocchi.yaook.cloud/metricd", group: None;
    /// Any ceilometer service (central, notification).
    CeilometerAnyService = "CEILOMETER_ANY_SERVICE" => "ceilometer.yaook.cloud/ceilometer-any-service", group: None;
    /// ceilometer-notification.
    CeilometerNotification = "CEILOMETER_NOTIFICATION" => "ceilometer.yaook.cloud/notification", group: Some(K::CeilometerAnyService);
    /// ceilometer-central.
    CeilometerCentral = "CEILOMETER_CENTRAL" => "ceilometer.yaook.cloud/central", group: Some(K::CeilometerAnyService);
}

impl fmt::Display for SchedulingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AsRef<str> for SchedulingKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// A string that names no key of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a yaook scheduling key (neither a label key such as `compute.yaook.cloud/api` nor a name such as `COMPUTE_API`)"
)]
pub struct UnknownSchedulingKey(pub String);

impl FromStr for SchedulingKey {
    type Err = UnknownSchedulingKey;

    /// Parses a label key (`compute.yaook.cloud/api`) or yaook's name (`COMPUTE_API`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchedulingKey::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s || k.python_name() == s)
            .ok_or_else(|| UnknownSchedulingKey(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windlass::cluster::validate_label_key;

    #[test]
    fn catalogue_values_are_exact_and_unique() {
        assert_eq!(SchedulingKey::ALL.len(), 41);
        let mut values: Vec<_> = SchedulingKey::ALL.iter().map(|k| k.as_str()).collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), 41);
        for key in SchedulingKey::ALL {
            assert_eq!(validate_label_key(key.as_str()), Ok(()), "{key}");
            assert_eq!(key.as_str().parse::<SchedulingKey>(), Ok(*key));
            assert_eq!(key.python_name().parse::<SchedulingKey>(), Ok(*key));
            if let Some(group) = key.group() {
                assert_eq!(group.group(), None, "groups do not nest: {key}");
            }
        }
        // A sample checked by hand against yaook's catalogue.
        assert_eq!(
            SchedulingKey::OperatorConfiguredDaemonSet.as_str(),
            "operator.yaook.cloud/configured-daemon-set"
        );
        assert_eq!(
            SchedulingKey::InfraDatabase.as_str(),
            "infra.yaook.cloud/db"
        );
        assert_eq!(
            SchedulingKey::ComputeMetadataApi.as_str(),
            "compute.yaook.cloud/metadata-api"
        );
        assert_eq!(
            SchedulingKey::CeilometerAnyService.as_str(),
            "ceilometer.yaook.cloud/ceilometer-any-service"
        );
        assert_eq!(
            SchedulingKey::NetworkNeutronDhcpAgent.python_name(),
            "NETWORK_NEUTRON_DHCP_AGENT"
        );
        assert!("compute.yaook.cloud/nope".parse::<SchedulingKey>().is_err());
    }
}
