//! The table definition, once, next to the keys: key attributes, the
//! service's four global secondary indexes, the worker's own sparse index,
//! and the stream setting. Everything that creates a table (tests, the CLI,
//! `infra/`) goes through [`TableSchema`].

use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
};

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

/// One global secondary index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub name: &'static str,
    pub partition_key: &'static str,
    pub sort_key: Option<&'static str>,
    /// `None`: keys only; `Some(attrs)`: INCLUDE those attributes.
    pub include: Option<&'static [&'static str]>,
}

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
/// migration; see the README).
pub const INVITATION_EXPIRY: IndexSpec = IndexSpec {
    name: INVITATION_EXPIRY_INDEX,
    partition_key: SK,
    sort_key: Some(attr::LINK_EXPIRY_DATETIME),
    include: Some(&[attr::INVITATION_LINK_HASH]),
};

/// The table as the worker expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    pub indexes: Vec<IndexSpec>,
    /// Stream with NEW_AND_OLD_IMAGES.
    pub stream: bool,
}

impl Default for TableSchema {
    fn default() -> Self {
        TableSchema::nishiki()
    }
}

impl TableSchema {
    /// The full target schema: the service's indexes, the worker's
    /// invitation-expiry index, and a NEW_AND_OLD_IMAGES stream.
    pub fn nishiki() -> Self {
        let mut indexes = SERVICE_INDEXES.to_vec();
        indexes.push(INVITATION_EXPIRY);
        TableSchema {
            indexes,
            stream: true,
        }
    }

    /// The live table before the worker's migration: no invitation-expiry
    /// index (the sweep falls back to a scan).
    pub fn without_invitation_expiry_index() -> Self {
        TableSchema {
            indexes: SERVICE_INDEXES.to_vec(),
            stream: true,
        }
    }

    pub fn has_index(&self, name: &str) -> bool {
        self.indexes.iter().any(|i| i.name == name)
    }

    /// Every attribute used as a key of the table or of an index.
    pub fn key_attributes(&self) -> Vec<&'static str> {
        let mut names = vec![PK, SK];
        for idx in &self.indexes {
            for name in std::iter::once(idx.partition_key).chain(idx.sort_key) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// Fill a CreateTable request (on-demand billing, like the live table).
    pub fn create_table(&self, req: CreateTableFluentBuilder) -> CreateTableFluentBuilder {
        let mut req = req
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key(PK, KeyType::Hash))
            .key_schema(key(SK, KeyType::Range));
        for name in self.key_attributes() {
            req = req.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("name and type are set"),
            );
        }
        for idx in &self.indexes {
            req = req.global_secondary_indexes(index(idx));
        }
        if self.stream {
            req = req.stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .build()
                    .expect("stream_enabled is set"),
            );
        }
        req
    }
}

impl TableSchema {
    /// The table as a CloudFormation `AWS::DynamoDB::Table` resource
    /// (the `NishikiTable` resource of `infra/template.yaml` is this, checked
    /// by `tests/infra.rs`).
    pub fn to_cloudformation(&self, table_name: serde_json::Value) -> serde_json::Value {
        use serde_json::json;
        let key = |name: &str, kind: &str| json!({"AttributeName": name, "KeyType": kind});
        let indexes: Vec<_> = self
            .indexes
            .iter()
            .map(|i| {
                let mut keys = vec![key(i.partition_key, "HASH")];
                if let Some(sk) = i.sort_key {
                    keys.push(key(sk, "RANGE"));
                }
                let projection = match i.include {
                    None => json!({"ProjectionType": "KEYS_ONLY"}),
                    Some(attrs) => json!({"ProjectionType": "INCLUDE", "NonKeyAttributes": attrs}),
                };
                json!({"IndexName": i.name, "KeySchema": keys, "Projection": projection})
            })
            .collect();
        let attributes: Vec<_> = self
            .key_attributes()
            .into_iter()
            .map(|a| json!({"AttributeName": a, "AttributeType": "S"}))
            .collect();
        let mut props = json!({
            "TableName": table_name,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attributes,
            "KeySchema": [key(PK, "HASH"), key(SK, "RANGE")],
            "GlobalSecondaryIndexes": indexes,
        });
        if self.stream {
            props["StreamSpecification"] = json!({"StreamViewType": "NEW_AND_OLD_IMAGES"});
        }
        json!({
            "Type": "AWS::DynamoDB::Table",
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": props,
        })
    }
}

fn key(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .expect("name and key type are set")
}

/// The SDK form of one index (also used by the migration that adds it).
pub fn index(spec: &IndexSpec) -> GlobalSecondaryIndex {
    let projection = match spec.include {
        None => Projection::builder()
            .projection_type(ProjectionType::KeysOnly)
            .build(),
        Some(attrs) => {
            let mut p = Projection::builder().projection_type(ProjectionType::Include);
            for a in attrs {
                p = p.non_key_attributes(*a);
            }
            p.build()
        }
    };
    let mut gsi = GlobalSecondaryIndex::builder()
        .index_name(spec.name)
        .key_schema(key(spec.partition_key, KeyType::Hash))
        .projection(projection);
    if let Some(sk) = spec.sort_key {
        gsi = gsi.key_schema(key(sk, KeyType::Range));
    }
    gsi.build().expect("name, keys and projection are set")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = TableSchema::nishiki();
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
        assert!(!TableSchema::without_invitation_expiry_index().has_index(INVITATION_EXPIRY_INDEX));
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
