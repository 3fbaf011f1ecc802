import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
application = get_wsgi_application()
# Import the URLconf, and with it every view module (reportlab for the PDFs, DRF, the
# schema), while the server boots: otherwise the first request of each worker process pays
# for it (seconds on a loaded machine; the statement bench measured it as a "cold" page).
URL_PATTERNS = get_resolver().url_patterns
