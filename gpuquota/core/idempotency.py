"""A creating request sent twice makes one thing: the API's `Idempotency-Key` header and
the web forms' one-time token (docs/api.md, Idempotency).

The key is claimed, per user, by inserting its row in the same transaction as the work it
guards: a second request with the key waits on the unique index until the first commits
(then answers the first's stored result) or rolls back (then runs itself). A request that
failed keeps nothing, so its retry runs again; a key is kept `IDEMPOTENCY_KEY_TTL_S`, and
the same key with a different request is refused (422), never run.
"""

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import wraps

from django.contrib import messages
from django.db import connection, transaction
from django.shortcuts import redirect
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from gpuquota.core.conf import IDEMPOTENCY_KEY_TTL_S
from gpuquota.core.errors import DomainError
from gpuquota.core.models import IdempotencyKey

HEADER = "Idempotency-Key"
FORM_FIELD = "form_token"
KEY_RE = re.compile(r"[\x21-\x7e]{1,255}")  # printable ASCII, no spaces
KEY_RULE = "1 to 255 printable ASCII characters, no spaces"
IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER, str, OpenApiParameter.HEADER, required=False,
    description=f"Optional, {KEY_RULE} (a UUID is a good key), scoped to the caller. A repeat "
    "with the same key and body answers the first result (same status and body, header "
    "`Idempotent-Replayed: true`) and creates nothing; the same key with another body is "
    "a 422. A request that failed keeps nothing (its retry runs again). Keys expire after "
    "IDEMPOTENCY_KEY_TTL_S (24 h).")


class KeyReused(DomainError):
    """The key was already used, by this user, for a different request."""

    status_code = 422
    code = "idempotency_key_reused"


@dataclass(frozen=True)
class Claim:
    """A key claimed for this request (`first` None: run it now) or its first answer."""

    key_id: int | None
    first: IdempotencyKey | None


def request_fingerprint(*, method: str, path: str, data) -> str:
    """What makes two requests the same: method, path and the parsed body (so a resend
    that only orders its JSON keys differently is the same request)."""
    if hasattr(data, "lists"):  # a form's QueryDict: every value of every field
        data = {name: values for name, values in data.lists()
                if name not in (FORM_FIELD, "csrfmiddlewaretoken")}
    text = json.dumps([method, path, data], sort_keys=True, cls=JSONEncoder)
    return hashlib.sha256(text.encode()).hexdigest()


def idempotency_claim(*, user, key: str, fingerprint: str,
                      now: datetime | None = None) -> Claim:
    """Claim `key` for `user` in the caller's transaction, or return its first answer; a
    KeyReused when that answer was to a different request."""
    now = now or timezone.now()
    IdempotencyKey.objects.filter(user=user, key=key, expires_at__lte=now).delete()
    values = {"user_id": user.pk, "key": key, "fingerprint": fingerprint, "status_code": 0,
              "response_body": "", "created_at": now,
              "expires_at": now + timedelta(seconds=IDEMPOTENCY_KEY_TTL_S)}
    fields = {f.column: f for f in IdempotencyKey._meta.concrete_fields}
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:  # INSERT ... ON CONFLICT: the ORM has no "did it"
        cursor.execute(
            f"INSERT INTO {IdempotencyKey._meta.db_table} ({', '.join(map(quote, values))}) "
            f"VALUES ({', '.join(['%s'] * len(values))}) "
            f"ON CONFLICT ({quote('user_id')}, {quote('key')}) DO NOTHING RETURNING id",
            [fields[c].get_db_prep_save(v, connection) for c, v in values.items()])
        row = cursor.fetchone()
    if row is not None:
        return Claim(row[0], None)
    first = IdempotencyKey.objects.get(user=user, key=key)
    if first.fingerprint != fingerprint:
        raise KeyReused(f"This {HEADER} was already used for a different request (another "
                        "body or endpoint): use a new key for a new request.", field=HEADER)
    return Claim(None, first)


def idempotency_record(*, claim: Claim, status_code: int, body, kept: bool) -> None:
    """Store the answer of a claimed request (`kept`), or give the key up (a failure: a
    retry runs again)."""
    rows = IdempotencyKey.objects.filter(pk=claim.key_id)
    if kept:
        rows.update(status_code=status_code, response_body=json.dumps(body, cls=JSONEncoder))
    else:
        rows.delete()


def idempotent_post(method: Callable) -> Callable:
    """An API view's creating POST honours `Idempotency-Key`: a repeat gets the first
    answer (same status and body, header `Idempotent-Replayed: true`)."""
    @wraps(method)
    def wrapper(view, request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if key is None:
            return method(view, request, *args, **kwargs)
        if not KEY_RE.fullmatch(key):
            raise DomainError(f"{HEADER} must be {KEY_RULE}.", field=HEADER)
        fingerprint = request_fingerprint(method=request.method, path=request.path,
                                          data=request.data)
        with transaction.atomic():
            claim = idempotency_claim(user=request.user, key=f"api:{key}",
                                      fingerprint=fingerprint)
            if claim.first is not None:
                return Response(json.loads(claim.first.response_body),
                                status=claim.first.status_code,
                                headers={"Idempotent-Replayed": "true"})
            response = method(view, request, *args, **kwargs)
            idempotency_record(claim=claim, status_code=response.status_code,
                               body=response.data, kept=200 <= response.status_code < 300)
        return response
    return wrapper


def form_submit_once(request, run: Callable[[], object]):
    """A web form's POST run once per one-time token (`form_token`): `run` returns the
    redirect of a success (kept) or None (the form shows its errors; the token stays
    usable). A resent form gets the first redirect again, with a note; a token reused for
    different input raises KeyReused (the page offers a new token)."""
    token = request.POST.get(FORM_FIELD, "")
    if not KEY_RE.fullmatch(token):
        return run()  # a form from before tokens, or a script: unprotected, as before
    fingerprint = request_fingerprint(method="POST", path=request.path, data=request.POST)
    with transaction.atomic():
        claim = idempotency_claim(user=request.user, key=f"form:{token}",
                                  fingerprint=fingerprint)
        if claim.first is not None:
            messages.info(request, "This form was already sent; nothing was done twice.")
            return redirect(json.loads(claim.first.response_body)["location"])
        response = run()
        location = response.get("Location") if response is not None else None
        idempotency_record(claim=claim, status_code=getattr(response, "status_code", 0),
                           body={"location": location}, kept=location is not None)
    return response


def idempotency_keys_expire(*, now: datetime | None = None) -> int:
    """Delete the keys past their expiry; how many."""
    return IdempotencyKey.objects.filter(expires_at__lte=now or timezone.now()).delete()[0]
