"""What accounts adds to the pages of others (`gpuquota.core.contributions`): refused
provider logins, on the admin's home page."""

from accounts.sso.rules import sso_attention

ATTENTION = [sso_attention]
