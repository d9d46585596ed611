#!/usr/bin/env python3
"""Regenerates the bad-input corpus (tests/bad_input/*.json and manifest.json).
Run: python3 tests/bad_input/generate.py; then cargo test --test it bad_input::."""
import json, os, copy
OUT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(OUT, exist_ok=True)
ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/nishiki-table-prod-db/stream/2024-03-22T22:03:33.123"
U = "a0000000-0000-4000-8000-0000000a0b01"
G = "b0000000-0000-4000-8000-0000000b0b01"
C = "c0000000-0000-4000-8000-0000000c0b01"
F = "f0000000-0000-4000-8000-0000000f0b01"
EMAIL = "hanako.yamada@example.com"
NAME = "Hanako Yamada"
manifest = []

def S(v): return {"S": v}

def rec(eid, name, seq, keys, new=None, old=None, ddb_extra=None, top=None):
    ddb = {"ApproximateCreationDateTime": 1711143813, "Keys": keys}
    if new is not None: ddb["NewImage"] = new
    if old is not None: ddb["OldImage"] = old
    ddb["SequenceNumber"] = seq
    ddb["SizeBytes"] = 250
    ddb["StreamViewType"] = "NEW_AND_OLD_IMAGES"
    if ddb_extra: ddb.update(ddb_extra)
    r = {"awsRegion": "eu-west-1", "dynamodb": ddb, "eventID": eid, "eventName": name,
         "eventSource": "aws:dynamodb", "eventSourceARN": ARN, "eventVersion": "1.1"}
    if top: r.update(top)
    return r

def keys(pk, sk): return {"PK": S(pk), "SK": S(sk)}
def group_img(pk=G, **extra):
    d = {"PK": S(pk), "SK": S("Group"), "GroupName": S("Home")}
    d.update(extra); return d
def user_img(**over):
    d = {"PK": S(U), "SK": S("User"), "UserName": S(NAME), "EMailAddress": S(EMAIL)}
    d.update(over); return d
def food(**over):
    d = {"FoodId": S(F), "Name": S("Milk"), "Unit": S("l"), "Quantity": {"N": "2"},
         "Category": S("dairy"), "Expiry": S("2024-03-26T00:00:00.000Z"),
         "CreatedAt": S("2024-03-20T18:30:12.345Z")}
    d.update(over); return {"M": d}
def container_img(foods):
    return {"PK": S(C), "SK": S("Container"), "ContainerName": S("Fridge"), "Foods": foods}

def event(*records): return {"Records": list(records)}

def case(file, what, cls, fragment, content, key=None, private=None, raw=False):
    path = os.path.join(OUT, file)
    if raw:
        data = content if isinstance(content, bytes) else content.encode()
        open(path, "wb").write(data)
    else:
        open(path, "w").write(json.dumps(content, indent=1, ensure_ascii=False) + "\n")
    m = {"file": file, "what": what, "class": cls, "fragment": fragment}
    if key is not None: m["key"] = key
    if private: m["private"] = private
    manifest.append(m)

good = rec("good-1", "INSERT", "000000000000000000201", keys(G, "Group"), new=group_img())

# ---- not JSON at all (byte level) ----
full = json.dumps(event(rec("e-trunc", "INSERT", "000000000000000000201", keys(U, "User"), new=user_img())))
case("truncated-json.json", "a stream event cut off mid-record", "not_json", "EOF while parsing", full[: len(full) // 2], raw=True, private=[EMAIL, NAME])
case("not-json-xml.json", "an XML body instead of JSON", "not_json", "expected value", '<?xml version="1.0"?><Records><Record/></Records>\n', raw=True)
case("empty-body.json", "an empty body", "not_json", "empty", "", raw=True)
case("whitespace-body.json", "a body of whitespace only", "not_json", "empty", " \n\t\n", raw=True)
deep = "[" * 200 + "]" * 200
case("nesting-over-json-limit.json", "an attribute nested 200 levels deep (over the JSON parser's recursion limit of 128)",
     "not_json", "recursion limit exceeded",
     '{"Records": [{"eventID": "e-deep", "eventName": "INSERT", "dynamodb": {"Keys": {"PK": {"S": "%s"}, "SK": {"S": "Group"}}, "NewImage": {"Deep": %s}}}]}\n' % (G, deep), raw=True)
case("invalid-utf8.json", "bytes that are not UTF-8 inside a string", "not_json", "invalid unicode", b'{"Records": [{"eventID": "\xff\xfe"}]}\n', raw=True)

# ---- whole-event errors (not a DynamoDB Streams event) ----
case("records-not-array.json", "\"Records\" is an object, not an array", "envelope", "\"Records\" is not an array",
     {"Records": {"0": good}})
case("records-wrong-case.json", "\"records\" instead of \"Records\"", "envelope", "no \"Records\" array",
     {"records": [good]})
case("top-level-array.json", "a bare array of records without the envelope", "envelope", "no \"Records\" array", [good])
case("sqs-event.json", "an SQS event sent to the stream function", "envelope", "aws:sqs", {"Records": [{
    "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d", "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
    "body": "{\"PK\": \"x\"}", "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1545082649183"},
    "messageAttributes": {}, "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3", "eventSource": "aws:sqs",
    "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue", "awsRegion": "us-east-2"}]})
case("s3-event.json", "an S3 notification sent to the stream function", "envelope", "aws:s3", {"Records": [{
    "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-2", "eventTime": "2019-09-03T19:37:27.192Z",
    "eventName": "ObjectCreated:Put", "userIdentity": {"principalId": "AWS:AIDAINPONIXQXHT3IKHL2"},
    "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": "my-bucket", "arn": "arn:aws:s3:::my-bucket"},
           "object": {"key": "b21b84d653bb07b05b1e6b33684dc11b", "size": 1305107}}}]})
case("sns-event.json", "an SNS notification (\"EventSource\", capitalised) sent to the stream function", "envelope", "aws:sns", {"Records": [{
    "EventVersion": "1.0", "EventSubscriptionArn": "arn:aws:sns:us-east-1:123456789012:sns-lambda:21be56ed",
    "EventSource": "aws:sns", "Sns": {"Type": "Notification", "MessageId": "95df01b4-ee98-5cb9-9903-4c221d41eb5e",
    "Subject": "example subject", "Message": "example message", "Timestamp": "2019-01-02T12:45:07.000Z"}}]})
case("eventbridge-schedule-event.json", "an EventBridge scheduled event sent to the stream function", "envelope", "no \"Records\" array", {
    "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa", "detail-type": "Scheduled Event",
    "source": "aws.events", "account": "123456789012", "time": "2024-03-25T03:00:00Z", "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/nishiki-audit"], "detail": {}})
case("json-string-event.json", "a JSON string instead of an event object", "envelope", "no \"Records\" array", "Records")

# ---- records that do not decode (skipped; the batch goes on) ----
case("record-not-object.json", "a record that is a string", "malformed", "record is not a JSON object", event("INSERT"))
case("record-null.json", "a record that is null", "malformed", "record is not a JSON object", event(None))
r = rec("e-no-ddb", "INSERT", "0", keys(G, "Group")); del r["dynamodb"]
case("missing-dynamodb.json", "a record without its \"dynamodb\" object", "malformed", "no dynamodb object", event(r))
r = rec("e-ddb-str", "INSERT", "0", keys(G, "Group")); r["dynamodb"] = "Keys"
case("dynamodb-not-object.json", "\"dynamodb\" is a string", "malformed", "dynamodb is not an object", event(r))
r = rec("e-no-keys", "INSERT", "000000000000000000202", keys(G, "Group"), new=group_img()); del r["dynamodb"]["Keys"]
case("missing-keys.json", "a record without Keys (the key is still found in NewImage for the report)", "malformed", "no Keys", event(r), key=f"PK={G}, SK=Group")
r = rec("e-keys-list", "INSERT", "000000000000000000202", ["PK", "SK"])
case("keys-not-object.json", "Keys is a list", "malformed", "Keys is not an object", event(r))
case("event-name-delete.json", "eventName DELETE (not one of INSERT, MODIFY, REMOVE)", "malformed", "unknown eventName \"DELETE\"",
     event(rec("e-delete", "DELETE", "000000000000000000203", keys(G, "Group"), old=group_img())), key=f"PK={G}, SK=Group")
case("event-name-lowercase.json", "eventName in lower case", "malformed", "unknown eventName \"insert\"",
     event(rec("e-lower", "insert", "000000000000000000203", keys(G, "Group"), new=group_img())), key=f"PK={G}, SK=Group")
r = rec("e-x", "INSERT", "000000000000000000204", keys(G, "Group"), new=group_img()); del r["eventID"]
case("missing-event-id.json", "a record without eventID", "malformed", "no eventID", event(r), key=f"PK={G}, SK=Group")
case("unknown-type-tag.json", "an attribute with an unknown type tag {\"X\": ...}", "malformed", "NewImage attribute GroupName",
     event(rec("e-tag", "INSERT", "000000000000000000205", keys(G, "Group"), new=group_img(GroupName={"X": "Home"}))), key=f"PK={G}, SK=Group")
case("two-type-tags.json", "an attribute with two type tags", "malformed", "NewImage attribute GroupName",
     event(rec("e-2tags", "INSERT", "000000000000000000205", keys(G, "Group"), new=group_img(GroupName={"S": "Home", "N": "1"}))), key=f"PK={G}, SK=Group")
case("base64-garbage.json", "a B attribute that is not base64", "malformed", "NewImage attribute Avatar",
     event(rec("e-b64", "INSERT", "000000000000000000206", keys(G, "Group"), new=group_img(Avatar={"B": "%%% not base64 %%%"}))), key=f"PK={G}, SK=Group")
case("untagged-email.json", "an e-mail address without a type tag (the address must not reach the error or the logs)", "malformed", "NewImage attribute EMailAddress",
     event(rec("e-untagged", "INSERT", "000000000000000000207", keys(U, "User"), new=user_img(EMailAddress=EMAIL))), key=f"PK={U}, SK=User", private=[EMAIL, NAME])
case("image-is-a-string.json", "NewImage is a string holding a user's e-mail address", "malformed", "NewImage is not an object",
     event(rec("e-imgstr", "INSERT", "000000000000000000207", keys(U, "User"), new=f"{NAME} <{EMAIL}>")), key=f"PK={U}, SK=User", private=[EMAIL, NAME])
case("sequence-number-not-numeric.json", "SequenceNumber with a letter", "malformed", "bad SequenceNumber",
     event(rec("e-seq", "INSERT", "00000000000000000020x", keys(G, "Group"), new=group_img())), key=f"PK={G}, SK=Group")
case("sequence-number-float.json", "SequenceNumber as a JSON float", "malformed", "bad SequenceNumber",
     event(rec("e-seqf", "INSERT", 2.08e20, keys(G, "Group"), new=group_img())), key=f"PK={G}, SK=Group")
case("creation-time-wrong-type.json", "ApproximateCreationDateTime is an object", "malformed", "ApproximateCreationDateTime is not a number",
     event(rec("e-act", "INSERT", "000000000000000000209", keys(G, "Group"), new=group_img(), ddb_extra={"ApproximateCreationDateTime": {"seconds": 1711143813}})), key=f"PK={G}, SK=Group")
case("creation-time-not-a-time.json", "ApproximateCreationDateTime is a word", "malformed", "ApproximateCreationDateTime is not a valid epoch time",
     event(rec("e-act2", "INSERT", "000000000000000000209", keys(G, "Group"), new=group_img(), ddb_extra={"ApproximateCreationDateTime": "yesterday"})), key=f"PK={G}, SK=Group")
case("kinesis-record-in-batch.json", "a record with eventSource aws:kinesis in a DynamoDB batch", "malformed", "eventSource \"aws:kinesis\"",
     event(rec("e-kin", "INSERT", "000000000000000000210", keys(G, "Group"), new=group_img(), top={"eventSource": "aws:kinesis"})), key=f"PK={G}, SK=Group")
big = "x" * (410 * 1024)
case("item-over-400kb.json", "a NewImage of about 410 KB (over DynamoDB's 400 KB item limit)", "malformed", "over DynamoDB's 400 KB item limit",
     event(rec("e-big", "MODIFY", "000000000000000000211", keys(G, "Group"), new=group_img(Notes=S(big)), old=group_img())), key=f"PK={G}, SK=Group")

# ---- records that decode but are not items of this table, or not usable (rejected; the batch goes on) ----
case("keys-pk-number.json", "Keys with PK of type N", "rejected", "missing or non-string key attribute PK",
     event(rec("e-pkn", "INSERT", "000000000000000000301", {"PK": {"N": "12345"}, "SK": S("User")}, new={"PK": {"N": "12345"}, "SK": S("User")})), key="PK=12345, SK=User")
case("wrong-case-attribute-names.json", "key attributes named pk and Sk", "rejected", "missing or non-string key attribute PK",
     event(rec("e-case", "INSERT", "000000000000000000302", {"pk": S(G), "Sk": S("Group")}, new={"pk": S(G), "Sk": S("Group"), "GroupName": S("Home")})), key=f"Sk=Group, pk={G}")
case("wrong-case-sort-key.json", "SK \"group\" instead of \"Group\"", "rejected", "wrong case",
     event(rec("e-sk-case", "INSERT", "000000000000000000303", keys(G, "group"), new=group_img())), key=f"PK={G}, SK=group")
case("wrong-case-sort-key-prefix.json", "SK prefix \"container#\" instead of \"Container#\"", "rejected", "wrong case",
     event(rec("e-prefix", "INSERT", "000000000000000000304", keys(G, "container#" + C), new={"PK": S(G), "SK": S("container#" + C), "ContainerId": S(C)})), key=f"PK={G}, SK=container#{C}")
case("unknown-sort-key.json", "SK Profile, not a key of this table", "rejected", "unknown sort key",
     event(rec("e-unk", "INSERT", "000000000000000000305", keys(U, "Profile"), new={"PK": S(U), "SK": S("Profile")})), key=f"PK={U}, SK=Profile")
case("non-uuid-partition-key.json", "PK that is not a UUID", "rejected", "is not a lowercase hyphenated UUID",
     event(rec("e-nonuuid", "REMOVE", "000000000000000000306", keys("user-42", "User"), old={"PK": S("user-42"), "SK": S("User"), "UserName": S(NAME), "EMailAddress": S(EMAIL)})), key="PK=user-42, SK=User", private=[EMAIL, NAME])
case("non-uuid-sort-key.json", "Group#<not a UUID> in SK", "rejected", "group id",
     event(rec("e-nonuuid-sk", "INSERT", "000000000000000000307", keys(U, "Group#home"), new={"PK": S(U), "SK": S("Group#home"), "GroupId": S("home")})), key=f"PK={U}, SK=Group#home")
case("uppercase-uuid.json", "an upper-case UUID (the service writes lower case)", "rejected", "is not a lowercase hyphenated UUID",
     event(rec("e-upper", "INSERT", "000000000000000000308", keys(G.upper(), "Group"), new=group_img(pk=G.upper()))), key=f"PK={G.upper()}, SK=Group")
nul = "b0000000-0000-4000-8000-0000000b0\u0000\u00e9"
case("nul-and-unicode-in-key.json", "NUL and non-ASCII characters in PK", "rejected", "is not a lowercase hyphenated UUID",
     event(rec("e-nul", "INSERT", "000000000000000000309", keys(nul, "Group"), new=group_img(pk=nul))))
emoji = "\U0001F96C#" + G
case("emoji-in-sort-key.json", "emoji and '#' in the SK", "rejected", "unknown sort key",
     event(rec("e-emoji", "INSERT", "000000000000000000310", keys(G, emoji), new={"PK": S(G), "SK": S(emoji)})))
case("insert-without-new-image.json", "INSERT without NewImage", "rejected", "INSERT without NewImage",
     event(rec("e-ins", "INSERT", "000000000000000000311", keys(G, "Group"))), key=f"PK={G}, SK=Group")
case("modify-without-new-image.json", "MODIFY of a container without NewImage (must not read as 'every food removed')", "rejected", "MODIFY without NewImage",
     event(rec("e-mod", "MODIFY", "000000000000000000312", keys(C, "Container"), old=container_img({"L": [food()]}))), key=f"PK={C}, SK=Container")
other = "b0000000-0000-4000-8000-0000000b0b99"
case("new-image-key-differs.json", "NewImage's PK differs from Keys", "rejected", "NewImage key differs from Keys",
     event(rec("e-differs", "INSERT", "000000000000000000314", keys(G, "Group"), new=group_img(pk=other))), key=f"PK={G}, SK=Group")
case("membership-group-id-differs.json", "a membership whose GroupId disagrees with its SK", "rejected", "GroupId disagrees with the sort key",
     event(rec("e-member", "INSERT", "000000000000000000315", keys(U, "Group#" + G), new={"PK": S(U), "SK": S("Group#" + G), "GroupId": S(other)})), key=f"PK={U}, SK=Group#{G}")
case("foods-entry-not-a-map.json", "a Foods entry that is a string, not a map", "rejected", "attribute Foods: entry #1: Expected map",
     event(rec("e-food-str", "INSERT", "000000000000000000316", keys(C, "Container"), new=container_img({"L": [food(), S("Milk")]}))), key=f"PK={C}, SK=Container")
case("foods-not-a-list.json", "Foods is a string", "rejected", "expected a list",
     event(rec("e-foods-str", "INSERT", "000000000000000000317", keys(C, "Container"), new=container_img(S("Milk, Eggs")))), key=f"PK={C}, SK=Container")
case("food-expiry-not-a-date.json", "a food's Expiry is 'next tuesday'", "rejected", "ISO 8601",
     event(rec("e-expiry", "INSERT", "000000000000000000318", keys(C, "Container"), new=container_img({"L": [food(Expiry=S("next tuesday"))]}))), key=f"PK={C}, SK=Container")
case("link-expiry-datetime-not-a-string.json", "LinkExpiryDatetime is a number", "rejected", "LinkExpiryDatetime",
     event(rec("e-link", "INSERT", "000000000000000000319", keys(G, "InvitationLinkHash"), new={"PK": S(G), "SK": S("InvitationLinkHash"), "InvitationLinkHash": S("0123456789abcdef0123456789abcdef"), "LinkExpiryDatetime": {"N": "1711238400"}})), key=f"PK={G}, SK=InvitationLinkHash")
case("quantity-email-as-number.json", "a food's Quantity is N holding an e-mail address (serde_dynamo quotes it in 'single quotes')", "rejected", "attribute Foods: entry #0: Failed to parse '…' as a float",
     event(rec("e-qty-mail", "INSERT", "000000000000000000323", keys(C, "Container"), new=container_img({"L": [food(Quantity={"N": EMAIL})]}))), key=f"PK={C}, SK=Container", private=[EMAIL])
case("quantity-not-a-number.json", "a food's Quantity is N \"twelve\"", "rejected", "attribute Foods: entry #0: Failed to parse",
     event(rec("e-qty", "INSERT", "000000000000000000320", keys(C, "Container"), new=container_img({"L": [food(Quantity={"N": "twelve"})]}))), key=f"PK={C}, SK=Container")
case("email-in-number-field.json", "a user's e-mail address stored as N (the address must not reach the error or the logs)", "rejected", "EMailAddress",
     event(rec("e-email-n", "INSERT", "000000000000000000321", keys(U, "User"), new=user_img(EMailAddress={"N": EMAIL}))), key=f"PK={U}, SK=User", private=[EMAIL, NAME])
case("user-name-wrong-type.json", "UserName is a list holding the name and the address", "rejected", "UserName",
     event(rec("e-uname", "MODIFY", "000000000000000000322", keys(U, "User"), new=user_img(UserName={"L": [S(NAME), S(EMAIL)]}), old=user_img())), key=f"PK={U}, SK=User", private=[EMAIL, NAME])

case("email-in-sort-key.json", "a user's e-mail address in the SK (neither the reason, the rendered key nor the logs may show it)", "rejected", "unknown sort key",
     event(rec("e-sk-mail", "INSERT", "000000000000000000324", keys(U, "User#" + EMAIL), new={"PK": S(U), "SK": S("User#" + EMAIL), "UserName": S(NAME)})), key=f"PK={U}, SK=<redacted: contains @>", private=[EMAIL, NAME])
case("email-as-partition-key.json", "an e-mail address as PK of a User (neither the reason, the rendered key nor the logs may show it)", "rejected", "is not a lowercase hyphenated UUID",
     event(rec("e-pk-mail", "REMOVE", "000000000000000000325", keys(EMAIL, "User"), old={"PK": S(EMAIL), "SK": S("User"), "UserName": S(NAME), "EMailAddress": S(EMAIL)})), key="PK=<redacted: contains @>, SK=User", private=[EMAIL, NAME])

# ---- odd but valid: handled, nothing stalls ----
case("huge-sequence-number.json", "a 60-digit sequence number (longer than Lambda's 40)", "accepted", "handled",
     event(rec("e-huge-seq", "INSERT", "9" * 60, keys(G, "Group"), new=group_img())))
dup = rec("e-dup", "REMOVE", "000000000000000000401", keys("a0000000-0000-4000-8000-0000000a0d01", "User"), old={"PK": S("a0000000-0000-4000-8000-0000000a0d01"), "SK": S("User"), "UserName": S(NAME), "EMailAddress": S(EMAIL)})
case("remove-without-old-image.json", "REMOVE without OldImage (DynamoDB Local's second REMOVE when two deletes of one item race): taken from its keys, never parked", "accepted", "handled",
     event(rec("e-rem", "REMOVE", "000000000000000000313", keys(C, "Container"))))
case("duplicate-records.json", "the same record twice (same sequence number): at-least-once delivery", "accepted", "handled", event(dup, copy.deepcopy(dup)), private=[EMAIL, NAME])
near = "x" * (400 * 1024 - 2000)
case("item-just-under-400kb.json", "a NewImage just under DynamoDB's 400 KB item limit", "accepted", "handled",
     event(rec("e-near", "MODIFY", "000000000000000000402", keys(G, "Group"), new=group_img(Notes=S(near)), old=group_img())))
nested = S("leaf")
for i in range(30): nested = {"M": {"Level": nested}}
case("deeply-nested-map.json", "a map nested 30 levels deep (within DynamoDB's 32)", "accepted", "handled",
     event(rec("e-nested", "MODIFY", "000000000000000000403", keys(G, "Group"), new=group_img(Deep=nested), old=group_img())))
r = rec("e-ident", "REMOVE", "000000000000000000404", keys("a0000000-0000-4000-8000-0000000a0d02", "User"), old={"PK": S("a0000000-0000-4000-8000-0000000a0d02"), "SK": S("User"), "UserName": S(NAME), "EMailAddress": S(EMAIL)}, top={"userIdentity": "dynamodb.amazonaws.com"})
case("user-identity-not-an-object.json", "userIdentity is a string (ignored: a plain REMOVE)", "accepted", "handled", event(r), private=[EMAIL, NAME])
r = rec("e-local", "INSERT", "000000000000000000405", keys(G, "Group"), new=group_img(Tags=[], Meta={}))
for f in ("eventSourceARN", "awsRegion", "eventVersion"): del r[f]
for f in ("SizeBytes", "StreamViewType", "ApproximateCreationDateTime"): del r["dynamodb"][f]
case("dynamodb-local-omissions.json", "what DynamoDB Local omits (ARN, region, size, untagged empty list and map)", "accepted", "handled", event(r))

r = rec("66f16207=06be-46d6-b8ff-fc24a63b8c24", "INSERT", "000000000000000000406", keys(G, "Group"), new=group_img(), ddb_extra={"ApproximateCreationDateTime": 2.95427220})
case("fuzz-creation-time-round-trip.json", "found by the fuzzer: a creation time of 2.954 s was re-encoded as 2.9539999999999997 and read back a millisecond early", "accepted", "handled", event(r))

json.dump(manifest, open(os.path.join(OUT, "manifest.json"), "w"), indent=1, ensure_ascii=False)
open(os.path.join(OUT, "manifest.json"), "a").write("\n")
print(len(manifest), "cases")
