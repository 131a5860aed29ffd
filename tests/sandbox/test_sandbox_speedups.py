"""What the sandbox does to be cheaper changes no answer: one botocore data loader for every session, and each state
machine definition parsed once."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser, ASLParserException

import sandbox  # noqa: F401  (installs the shared loader)
from sandbox.statemachine import parse_once


def test_every_session_reads_botocore_data_through_one_loader_with_boto3_data_on_its_path_once() -> None:
    # Given two sessions, as two functions' execution environments make them
    first, second = boto3.session.Session(), boto3.session.Session()
    data = os.path.join(os.path.dirname(boto3.__file__), "data")

    # Then they share one loader, which has boto3's data folder on its search path once, not once a session
    assert first._loader is second._loader
    assert first._loader.search_paths.count(data) == 1
    # And what they load is botocore's model, parsed once
    model = first._loader.load_service_model("dynamodb", "service-2")
    assert model is second._loader.load_service_model("dynamodb", "service-2")
    assert "UpdateItem" in model["operations"]
    # And a client of each works alike
    assert first.client("sqs", region_name="us-east-1").meta.service_model.service_name == "sqs"
    assert second.client("sqs", region_name="us-east-1").meta.service_model.service_name == "sqs"


DEFINITION = json.dumps(
    {
        "StartAt": "Add",
        "States": {
            "Add": {"Type": "Pass", "Result": {"n": 1}, "ResultPath": "$.added", "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }
)


def test_a_definition_parsed_again_gives_a_program_of_its_own_from_the_same_tree() -> None:
    parse_once()
    parse_once()  # idempotent: one wrapper, not two

    program, tree = AmazonStateLanguageParser.parse(DEFINITION)
    again, same_tree = AmazonStateLanguageParser.parse(DEFINITION)

    assert same_tree is tree
    assert again is not program
    assert type(again) is type(program)
    assert list(again.states.states) == list(program.states.states) == ["Add", "Done"]


def test_a_definition_that_does_not_parse_is_refused_every_time() -> None:
    parse_once()
    broken = DEFINITION.replace('"StartAt"', '"Start"')
    for _ in range(2):
        with pytest.raises(ASLParserException):
            AmazonStateLanguageParser.parse(broken)
