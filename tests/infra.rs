//! `infra/table.template.json` is generated from the schema in code; this
//! test fails when they drift. `UPDATE_INFRA=1 cargo test --test infra`
//! rewrites the file.

use nishiki_worker::schema::TableSchema;
use serde_json::json;

fn expected() -> serde_json::Value {
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "The Nishiki table as the worker expects it (generated from src/schema.rs; do not edit by hand).",
        "Parameters": {
            "Stage": {"Type": "String", "AllowedValues": ["prod", "dev"], "Default": "dev"}
        },
        "Resources": {
            "NishikiTable": TableSchema::nishiki()
                .to_cloudformation(json!({"Fn::Sub": "nishiki-table-${Stage}-db"}))
        },
        "Outputs": {
            "TableName": {"Value": {"Ref": "NishikiTable"}},
            "StreamArn": {"Value": {"Fn::GetAtt": ["NishikiTable", "StreamArn"]}}
        }
    })
}

#[test]
fn table_template_matches_the_schema_in_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/infra/table.template.json");
    let want = serde_json::to_string_pretty(&expected()).unwrap() + "\n";
    if std::env::var_os("UPDATE_INFRA").is_some() {
        std::fs::write(path, &want).unwrap();
    }
    let have = std::fs::read_to_string(path).expect("infra/table.template.json exists");
    assert_eq!(
        have, want,
        "infra/table.template.json drifted from src/schema.rs; run UPDATE_INFRA=1 cargo test --test infra"
    );
}

#[test]
fn the_template_has_the_five_indexes_and_the_stream() {
    let t = expected();
    let props = &t["Resources"]["NishikiTable"]["Properties"];
    let names: Vec<_> = props["GlobalSecondaryIndexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["IndexName"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "UserAndGroupRelationship",
            "GroupAndContainerRelationship",
            "InvitationHash",
            "EMailAndUserIdRelationship",
            "InvitationLinkExpiry"
        ]
    );
    assert_eq!(
        props["StreamSpecification"]["StreamViewType"],
        "NEW_AND_OLD_IMAGES"
    );
    assert_eq!(t["Resources"]["NishikiTable"]["DeletionPolicy"], "Retain");
}
