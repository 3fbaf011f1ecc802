from django.urls import path

from gpuquota.jobs import api, views

urlpatterns = [
    path("jobs/", views.my_jobs, name="my_jobs"),
    path("jobs/mail/", views.job_mail, name="job_mail"),
    path("jobs/<int:pk>/", views.job_detail, name="job_detail"),
    path("teams/<slug:slug>/jobs/", views.team_jobs, name="team_jobs"),
    path("manage/jobs/", views.fleet_jobs, name="fleet_jobs"),
    path("api/v1/jobs", api.JobListView.as_view(), name="api-jobs"),
    path("api/v1/jobs/<int:pk>", api.JobDetailView.as_view(), name="api-job"),
]
