"""The PDF's energy and carbon section (docs/accounting.md, Energy), from
`reports.energy.statement_energy`: per line IT kWh, facility kWh and kg CO2e, the idle-reserved
energy as a row of its own, the totals and the PUE and intensity used."""

from xml.sax.saxutils import escape

from reportlab.lib import colors
from reportlab.lib.units import mm
from reportlab.platypus import KeepTogether, Paragraph, Spacer, Table, TableStyle

INK = colors.HexColor("#1f2933")
MUTED = colors.HexColor("#616e7c")
RULE = colors.HexColor("#cbd2d9")
NOTE = ("Information, not billed. IT energy as the GPUs' energy counters reported it; facility "
        "energy = IT energy \u00d7 the cluster's PUE; CO2e = facility energy \u00d7 the carbon "
        "intensity, hour by hour.")


def _figure(value) -> str:
    return "\u2014" if value is None else f"{value:,.3f}"


def energy_flowables(energy: dict | None, st, width: float) -> list:
    """The section's flowables (none without energy); `st` is the PDF's styles."""
    if not energy:
        return []
    rows = [["Kind", "GPU class", "IT energy (kWh)", "Facility energy (kWh)", "CO2e (kg)"]]
    for line in energy["lines"]:
        rows.append([Paragraph(escape(line.get_kind_display()), st.cell),
                     line.gpu_class_name or "", _figure(line.energy_kwh),
                     _figure(line.facility_energy_kwh), _figure(line.co2e_kg)])
    total = len(rows)
    rows.append(["Total", "", _figure(energy["energy_kwh"]), _figure(energy["facility_kwh"]),
                 _figure(energy["co2e_kg"])])
    if energy["idle"]:
        rows.append([[Paragraph("Idle reserved", st.cell),
                      Paragraph("the part of the reserved energy drawn while the reserved GPUs "
                                "were idle (included above)", st.reason)],
                     "", _figure(energy["idle"]["energy_kwh"]), "\u2014",
                     _figure(energy["idle"]["co2e_kg"])])
    table = Table(rows, colWidths=[width - 117 * mm, 27 * mm, 28 * mm, 36 * mm, 26 * mm],
                  repeatRows=1)
    table.setStyle(TableStyle([
        ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 8),
        ("TEXTCOLOR", (0, 0), (-1, 0), MUTED),
        ("FONT", (0, 1), (-1, -1), "Helvetica", 8.5),
        ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
        ("VALIGN", (0, 0), (-1, -1), "TOP"),
        ("LINEBELOW", (0, 0), (-1, 0), 0.8, INK),
        ("LINEBELOW", (0, 1), (-1, total - 2), 0.3, RULE),
        ("LINEABOVE", (0, total), (-1, total), 1, INK),
        ("FONT", (0, total), (-1, total), "Helvetica-Bold", 9),
    ]))
    basis = energy["basis"] or ["none configured for these clusters: no facility energy or CO2e"]
    notes = [Paragraph("PUE and carbon intensity", st.small)]
    notes += [Paragraph(escape(text), st.body) for text in basis]
    return [KeepTogether([Paragraph("Energy and carbon", st.h2), table, Spacer(1, 3),
                          Paragraph(NOTE, st.small), Spacer(1, 3), *notes])]
