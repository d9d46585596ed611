//! The table definition, once, next to the keys: key attributes, the
//! service's four global secondary indexes, the worker's own sparse index,
//! and the stream setting, as the engine's [`TableSchema`]. Everything that
//! creates a table (tests, the CLI, `infra/`) goes through [`nishiki`].

use worker_engine::schema::KeySchema;
pub use worker_engine::schema::{IndexSpec, TableSchema, index};

use crate::items::attr;
use crate::keys::{PK, SK};

/// Index: members of a group (`GroupId`, keys only).
pub const USER_AND_GROUP_INDEX: &str = "UserAndGroupRelationship";
/// Index: the group that owns a container (`ContainerId`, keys only).
pub const GROUP_AND_CONTAINER_INDEX: &str = "GroupAndContainerRelationship";
/// Index: an invitation link by its hash (`InvitationLinkHash`, includes
/// `LinkExpiryDatetime`).
pub const INVITATION_HASH_INDEX: &str = "InvitationHash";
/// Index: a user by e-mail (`EMailAddress`, keys only).
pub const EMAIL_INDEX: &str = "EMailAndUserIdRelationship";
/// The worker's sparse index of invitation links by expiry: partition `SK`
/// (always `InvitationLinkHash` for items carrying `LinkExpiryDatetime`),
/// sort `LinkExpiryDatetime`, projecting `InvitationLinkHash`.
pub const INVITATION_EXPIRY_INDEX: &str = "InvitationLinkExpiry";

/// The service's indexes, exactly as the live table has them.
pub const SERVICE_INDEXES: [IndexSpec; 4] = [
    IndexSpec {
        name: USER_AND_GROUP_INDEX,
        partition_key: attr::GROUP_ID,
        sort_key: None,
        include: None,
    },
    IndexSpec {
        name: GROUP_AND_CONTAINER_INDEX,
        partition_key: attr::CONTAINER_ID,
        sort_key: None,
        include: None,
    },
    IndexSpec {
        name: INVITATION_HASH_INDEX,
        partition_key: attr::INVITATION_LINK_HASH,
        sort_key: None,
        include: Some(&[attr::LINK_EXPIRY_DATETIME]),
    },
    IndexSpec {
        name: EMAIL_INDEX,
        partition_key: attr::EMAIL_ADDRESS,
        sort_key: None,
        include: None,
    },
];

/// The worker's invitation-expiry index (added to the live table by a
/// migration; see docs/DEPLOY.md).
pub const INVITATION_EXPIRY: IndexSpec = IndexSpec {
    name: INVITATION_EXPIRY_INDEX,
    partition_key: SK,
    sort_key: Some(attr::LINK_EXPIRY_DATETIME),
    include: Some(&[attr::INVITATION_LINK_HASH]),
};

/// The full target schema: `PK`/`SK` (strings), the service's indexes,
/// the worker's invitation-expiry index, and a NEW_AND_OLD_IMAGES stream.
pub fn nishiki() -> TableSchema {
    without_invitation_expiry_index().with_index(INVITATION_EXPIRY)
}

/// The live table before the worker's migration: no invitation-expiry
/// index (the sweep falls back to a scan).
pub fn without_invitation_expiry_index() -> TableSchema {
    SERVICE_INDEXES.into_iter().fold(
        TableSchema::new(KeySchema::composite(PK, SK)),
        TableSchema::with_index,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::ProjectionType;

    #[test]
    fn service_indexes_match_the_contract() {
        let names: Vec<_> = SERVICE_INDEXES
            .iter()
            .map(|i| (i.name, i.partition_key))
            .collect();
        assert_eq!(
            names,
            [
                ("UserAndGroupRelationship", "GroupId"),
                ("GroupAndContainerRelationship", "ContainerId"),
                ("InvitationHash", "InvitationLinkHash"),
                ("EMailAndUserIdRelationship", "EMailAddress"),
            ]
        );
        assert!(SERVICE_INDEXES.iter().all(|i| i.sort_key.is_none()));
        assert_eq!(
            SERVICE_INDEXES[2].include,
            Some(&["LinkExpiryDatetime"][..])
        );
    }

    #[test]
    fn key_attributes_are_defined_once() {
        let s = nishiki();
        assert_eq!(
            s.key_attributes(),
            [
                "PK",
                "SK",
                "GroupId",
                "ContainerId",
                "InvitationLinkHash",
                "EMailAddress",
                "LinkExpiryDatetime"
            ]
        );
        assert!(!without_invitation_expiry_index().has_index(INVITATION_EXPIRY_INDEX));
    }

    #[test]
    fn expiry_index_is_sparse_and_projects_the_hash() {
        let gsi = index(&INVITATION_EXPIRY);
        let keys: Vec<_> = gsi
            .key_schema()
            .iter()
            .map(|k| k.attribute_name().to_owned())
            .collect();
        assert_eq!(keys, ["SK", "LinkExpiryDatetime"]);
        let p = gsi.projection().unwrap();
        assert_eq!(p.projection_type(), Some(&ProjectionType::Include));
        assert_eq!(p.non_key_attributes(), ["InvitationLinkHash"]);
    }
}
