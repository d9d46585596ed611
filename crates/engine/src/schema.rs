//! A table's definition as data the app gives the engine: key attribute
//! names and types, global and local secondary indexes, the stream view,
//! and what the app's handlers need a stream record to carry. Everything that creates a table (tests, the CLI, templates) goes
//! through [`TableSchema`]; nothing in the engine names an attribute.

use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    LocalSecondaryIndex, Projection, ProjectionType, ScalarAttributeType, StreamSpecification,
    StreamViewType,
};

/// The DynamoDB type of a key attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarType {
    /// `S`
    String,
    /// `N`
    Number,
}

impl ScalarType {
    fn sdk(self) -> ScalarAttributeType {
        match self {
            ScalarType::String => ScalarAttributeType::S,
            ScalarType::Number => ScalarAttributeType::N,
        }
    }
    fn letter(self) -> &'static str {
        match self {
            ScalarType::String => "S",
            ScalarType::Number => "N",
        }
    }
}

/// The table's primary key: a partition key and an optional sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySchema {
    /// The partition (hash) key attribute's name.
    pub partition_key: &'static str,
    /// The sort (range) key attribute's name; `None`: the table has none.
    pub sort_key: Option<&'static str>,
}

impl KeySchema {
    /// A partition key and a sort key.
    pub const fn composite(partition_key: &'static str, sort_key: &'static str) -> Self {
        KeySchema {
            partition_key,
            sort_key: Some(sort_key),
        }
    }

    /// The two key attribute names, as the stream decoder and the log lines
    /// render them (a table without a sort key renders none).
    pub fn names(&self) -> (&'static str, &'static str) {
        (self.partition_key, self.sort_key.unwrap_or(""))
    }
}

/// The key of most single-table designs: `PK` and `SK`.
pub const DEFAULT_KEY: KeySchema = KeySchema::composite("PK", "SK");

/// One secondary index (global, or local when listed as such).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The index name, as queries name it ([`crate::store::QuerySpec::on_index`]).
    pub name: &'static str,
    /// The index's partition key attribute (a local index: the table's).
    pub partition_key: &'static str,
    /// The index's sort key attribute; `None`: it has none.
    pub sort_key: Option<&'static str>,
    /// `None`: keys only; `Some(attrs)`: INCLUDE those attributes.
    pub include: Option<&'static [&'static str]>,
}

/// What a stream record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamView {
    /// The item before and after the change: what a handler that compares
    /// them needs.
    NewAndOldImages,
    /// The item after the change (nothing for a removal).
    NewImage,
    /// The item before the change (nothing for an insert).
    OldImage,
    /// The key attributes only: a handler reads the item itself.
    KeysOnly,
}

impl StreamView {
    /// Every view, the richest first.
    pub const ALL: [StreamView; 4] = [
        StreamView::NewAndOldImages,
        StreamView::NewImage,
        StreamView::OldImage,
        StreamView::KeysOnly,
    ];

    /// The API's name (`NEW_AND_OLD_IMAGES`, ...): a table's
    /// `StreamViewType`, a record's `dynamodb.StreamViewType`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamView::NewAndOldImages => "NEW_AND_OLD_IMAGES",
            StreamView::NewImage => "NEW_IMAGE",
            StreamView::OldImage => "OLD_IMAGE",
            StreamView::KeysOnly => "KEYS_ONLY",
        }
    }

    /// The view of an API name; `None` for a name this code does not know.
    pub fn parse(name: &str) -> Option<StreamView> {
        StreamView::ALL.into_iter().find(|v| v.as_str() == name)
    }

    /// Whether a record of this view carries everything a record of
    /// `needed` carries: NEW_AND_OLD_IMAGES carries every view, NEW_IMAGE
    /// and OLD_IMAGE their own image and the keys, KEYS_ONLY the keys only.
    pub fn carries(self, needed: StreamView) -> bool {
        use StreamView::*;
        match self {
            NewAndOldImages => true,
            NewImage => matches!(needed, NewImage | KeysOnly),
            OldImage => matches!(needed, OldImage | KeysOnly),
            KeysOnly => needed == KeysOnly,
        }
    }
}

impl std::fmt::Display for StreamView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A table as an app expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// The table's primary key.
    pub key: KeySchema,
    /// Key attributes (of the table or an index) of type `N`; every other
    /// key attribute is `S`.
    pub number_attributes: Vec<&'static str>,
    /// Global secondary indexes.
    pub indexes: Vec<IndexSpec>,
    /// Local secondary indexes (partition key: the table's).
    pub local_indexes: Vec<IndexSpec>,
    /// The stream, if the table has one (what `table create` makes).
    pub stream: Option<StreamView>,
    /// What the app's stream handlers read from a record: a stream whose
    /// view carries less ([`StreamView::carries`]) is refused by `capture`
    /// and `dev`, as the handlers would find images missing. By default
    /// NEW_AND_OLD_IMAGES ([`TableSchema::new`]): handlers that read the old
    /// image of a change (a modification's previous values, a removed
    /// item) need both; an app whose handlers read less may say so
    /// ([`TableSchema::needing_stream`]).
    pub stream_needs: StreamView,
}

impl TableSchema {
    /// A table with this key, no index, a NEW_AND_OLD_IMAGES stream whose
    /// records must carry both images, and every key attribute a string.
    pub fn new(key: KeySchema) -> Self {
        TableSchema {
            key,
            number_attributes: Vec::new(),
            indexes: Vec::new(),
            local_indexes: Vec::new(),
            stream: Some(StreamView::NewAndOldImages),
            stream_needs: StreamView::NewAndOldImages,
        }
    }

    /// Handlers that read only what `view` carries (a stream of any view
    /// that carries it is accepted).
    pub fn needing_stream(mut self, view: StreamView) -> Self {
        self.stream_needs = view;
        self
    }

    /// Whether the app's handlers can work on a stream of this view.
    pub fn accepts_stream(&self, view: StreamView) -> bool {
        view.carries(self.stream_needs)
    }

    /// Every view the app accepts, the richest first.
    pub fn accepted_streams(&self) -> Vec<StreamView> {
        StreamView::ALL
            .into_iter()
            .filter(|v| self.accepts_stream(*v))
            .collect()
    }

    /// Add a global secondary index.
    pub fn with_index(mut self, index: IndexSpec) -> Self {
        self.indexes.push(index);
        self
    }

    /// Add a local secondary index.
    pub fn with_local_index(mut self, index: IndexSpec) -> Self {
        self.local_indexes.push(index);
        self
    }

    /// Make these key attributes numbers (`N`).
    pub fn with_numbers(mut self, names: &[&'static str]) -> Self {
        self.number_attributes.extend_from_slice(names);
        self
    }

    /// Without a stream.
    pub fn without_stream(mut self) -> Self {
        self.stream = None;
        self
    }

    /// Whether the table has a global or local secondary index `name`.
    pub fn has_index(&self, name: &str) -> bool {
        self.indexes
            .iter()
            .chain(&self.local_indexes)
            .any(|i| i.name == name)
    }

    /// The type of a key attribute.
    pub(crate) fn attribute_type(&self, name: &str) -> ScalarType {
        if self.number_attributes.contains(&name) {
            ScalarType::Number
        } else {
            ScalarType::String
        }
    }

    /// Every attribute used as a key of the table or of an index, the
    /// table's first.
    pub fn key_attributes(&self) -> Vec<&'static str> {
        let mut names = vec![self.key.partition_key];
        names.extend(self.key.sort_key);
        for idx in self.indexes.iter().chain(&self.local_indexes) {
            for name in std::iter::once(idx.partition_key).chain(idx.sort_key) {
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    fn table_keys(&self) -> Vec<KeySchemaElement> {
        let mut keys = vec![key(self.key.partition_key, KeyType::Hash)];
        if let Some(sk) = self.key.sort_key {
            keys.push(key(sk, KeyType::Range));
        }
        keys
    }

    /// Fill a CreateTable request (on-demand billing).
    pub fn create_table(&self, req: CreateTableFluentBuilder) -> CreateTableFluentBuilder {
        let mut req = req
            .billing_mode(BillingMode::PayPerRequest)
            .set_key_schema(Some(self.table_keys()));
        for name in self.key_attributes() {
            req = req.attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(self.attribute_type(name).sdk())
                    .build()
                    .expect("name and type are set"),
            );
        }
        for idx in &self.indexes {
            req = req.global_secondary_indexes(index(idx));
        }
        for idx in &self.local_indexes {
            req = req.local_secondary_indexes(local_index(idx));
        }
        if let Some(view) = self.stream {
            req = req.stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::from(view.as_str()))
                    .build()
                    .expect("stream_enabled is set"),
            );
        }
        req
    }

    /// The table as a CloudFormation `AWS::DynamoDB::Table` resource (a
    /// template's table resource is checked against this).
    pub fn to_cloudformation(&self, table_name: serde_json::Value) -> serde_json::Value {
        use serde_json::json;
        let key = |name: &str, kind: &str| json!({"AttributeName": name, "KeyType": kind});
        let index = |i: &IndexSpec| {
            let mut keys = vec![key(i.partition_key, "HASH")];
            if let Some(sk) = i.sort_key {
                keys.push(key(sk, "RANGE"));
            }
            let projection = match i.include {
                None => json!({"ProjectionType": "KEYS_ONLY"}),
                Some(attrs) => json!({"ProjectionType": "INCLUDE", "NonKeyAttributes": attrs}),
            };
            json!({"IndexName": i.name, "KeySchema": keys, "Projection": projection})
        };
        let attributes: Vec<_> = self
            .key_attributes()
            .into_iter()
            .map(|a| json!({"AttributeName": a, "AttributeType": self.attribute_type(a).letter()}))
            .collect();
        let mut keys = vec![key(self.key.partition_key, "HASH")];
        if let Some(sk) = self.key.sort_key {
            keys.push(key(sk, "RANGE"));
        }
        let mut props = json!({
            "TableName": table_name,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attributes,
            "KeySchema": keys,
        });
        if !self.indexes.is_empty() {
            props["GlobalSecondaryIndexes"] = self.indexes.iter().map(index).collect();
        }
        if !self.local_indexes.is_empty() {
            props["LocalSecondaryIndexes"] = self.local_indexes.iter().map(index).collect();
        }
        if let Some(view) = self.stream {
            props["StreamSpecification"] = json!({"StreamViewType": view.as_str()});
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

fn projection(spec: &IndexSpec) -> Projection {
    match spec.include {
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
    }
}

/// The SDK form of a global index (also used by a migration that adds one).
pub fn index(spec: &IndexSpec) -> GlobalSecondaryIndex {
    let mut gsi = GlobalSecondaryIndex::builder()
        .index_name(spec.name)
        .key_schema(key(spec.partition_key, KeyType::Hash))
        .projection(projection(spec));
    if let Some(sk) = spec.sort_key {
        gsi = gsi.key_schema(key(sk, KeyType::Range));
    }
    gsi.build().expect("name, keys and projection are set")
}

fn local_index(spec: &IndexSpec) -> LocalSecondaryIndex {
    let mut lsi = LocalSecondaryIndex::builder()
        .index_name(spec.name)
        .key_schema(key(spec.partition_key, KeyType::Hash))
        .projection(projection(spec));
    if let Some(sk) = spec.sort_key {
        lsi = lsi.key_schema(key(sk, KeyType::Range));
    }
    lsi.build().expect("name, keys and projection are set")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BY_OWNER: IndexSpec = IndexSpec {
        name: "ByOwner",
        partition_key: "Owner",
        sort_key: Some("Created"),
        include: Some(&["Title"]),
    };

    fn schema() -> TableSchema {
        TableSchema::new(KeySchema::composite("P", "S"))
            .with_numbers(&["S", "Created"])
            .with_index(BY_OWNER)
    }

    #[test]
    fn key_attributes_are_listed_once_with_their_types() {
        let s = schema();
        assert_eq!(s.key_attributes(), ["P", "S", "Owner", "Created"]);
        assert_eq!(s.attribute_type("S"), ScalarType::Number);
        assert_eq!(s.attribute_type("Owner"), ScalarType::String);
        assert!(s.has_index("ByOwner") && !s.has_index("Other"));
    }

    #[test]
    fn an_index_keeps_its_keys_and_projection() {
        let gsi = index(&BY_OWNER);
        let keys: Vec<_> = gsi
            .key_schema()
            .iter()
            .map(|k| k.attribute_name().to_owned())
            .collect();
        assert_eq!(keys, ["Owner", "Created"]);
        let p = gsi.projection().unwrap();
        assert_eq!(p.projection_type(), Some(&ProjectionType::Include));
        assert_eq!(p.non_key_attributes(), ["Title"]);
    }

    #[test]
    fn a_local_index_shares_the_partition_key() {
        let lsi = IndexSpec {
            name: "ByTitle",
            partition_key: "P",
            sort_key: Some("Title"),
            include: None,
        };
        let s = schema().with_local_index(lsi);
        assert_eq!(s.key_attributes(), ["P", "S", "Owner", "Created", "Title"]);
        assert!(s.has_index("ByTitle"));
        let cf = s.to_cloudformation(serde_json::json!("t"));
        let props = &cf["Properties"];
        assert_eq!(props["LocalSecondaryIndexes"][0]["IndexName"], "ByTitle");
        assert_eq!(
            props["LocalSecondaryIndexes"][0]["KeySchema"][1]["AttributeName"],
            "Title"
        );
        let req = local_index(&s.local_indexes[0]);
        assert_eq!(req.key_schema().len(), 2);
    }

    #[test]
    fn cloudformation_carries_types_and_the_stream_view() {
        let cf = schema().to_cloudformation(serde_json::json!("t"));
        let props = &cf["Properties"];
        assert_eq!(props["AttributeDefinitions"][1]["AttributeType"], "N");
        assert_eq!(props["KeySchema"][1]["AttributeName"], "S");
        assert_eq!(
            props["StreamSpecification"]["StreamViewType"],
            "NEW_AND_OLD_IMAGES"
        );
        assert!(props.get("LocalSecondaryIndexes").is_none());
    }

    #[test]
    fn a_stream_is_accepted_when_it_carries_what_the_handlers_read() {
        let s = schema();
        assert_eq!(s.accepted_streams(), [StreamView::NewAndOldImages]);
        for view in [
            StreamView::NewImage,
            StreamView::OldImage,
            StreamView::KeysOnly,
        ] {
            assert!(!s.accepts_stream(view), "{view}");
        }
        let new_only = schema().needing_stream(StreamView::NewImage);
        assert_eq!(
            new_only.accepted_streams(),
            [StreamView::NewAndOldImages, StreamView::NewImage]
        );
        let keys = schema().needing_stream(StreamView::KeysOnly);
        assert_eq!(keys.accepted_streams(), StreamView::ALL);
        // The stream a table is created with is one its handlers accept.
        assert!(s.accepts_stream(s.stream.unwrap()));
        for v in StreamView::ALL {
            assert_eq!(StreamView::parse(v.as_str()), Some(v));
        }
        assert_eq!(StreamView::parse("new_image"), None);
    }
}
