"""A ValidatingAdmissionPolicy evaluated as the API server does, with cel-python: every
expression compiled (a syntax error fails the test), the variables in order, then each
validation; the first that is false refuses with its message."""

from __future__ import annotations

import celpy


def _run(env: celpy.Environment, expression: str, activation: dict):
    return env.program(env.compile(expression)).evaluate(activation)


def evaluate(policy: dict, review: dict) -> tuple[bool, str]:
    """(allowed, message) of `policy` on an AdmissionReview's request."""
    env = celpy.Environment()
    request = review["request"]
    activation = {"object": celpy.json_to_cel(request["object"]),
                  "oldObject": celpy.json_to_cel(request.get("oldObject")),
                  "request": celpy.json_to_cel({k: v for k, v in request.items()
                                                if k not in ("object", "oldObject")})}
    variables: dict = {}
    for variable in policy["spec"].get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(variable["name"])] = _run(
            env, variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    for validation in policy["spec"]["validations"]:
        result = _run(env, validation["expression"], activation)
        if isinstance(result, Exception):
            raise result
        if not result:
            if "messageExpression" in validation:
                return False, str(_run(env, validation["messageExpression"], activation))
            return False, validation["message"]
    return True, ""


def compiles(expression: str) -> None:
    celpy.Environment().compile(expression)
