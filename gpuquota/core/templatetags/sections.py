"""`{% slot sections "name" %}`: the sections that other apps contribute to a slot of
this page (`gpuquota.core.sections`), each rendered in the page's context plus its own."""

from django import template
from django.utils.safestring import SafeString, mark_safe

from gpuquota.core.sections import Filled

register = template.Library()


@register.simple_tag(takes_context=True)
def slot(context: template.Context, sections: dict[str, list[Filled]], name: str) -> SafeString:
    """The HTML of the sections filled for slot `name`, in order."""
    html = []
    for section in sections[name]:
        page_template = context.template.engine.get_template(section.template)
        with context.push(section.context):
            html.append(page_template.render(context))
    return mark_safe("".join(html))  # each template escaped its own variables
