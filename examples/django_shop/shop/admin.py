from django.contrib import admin

from .models import Order, SentEmail


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ("id", "customer_email", "item", "total_cents", "confirmation_sent", "created_at")


@admin.register(SentEmail)
class SentEmailAdmin(admin.ModelAdmin):
    list_display = ("id", "to", "subject", "attempt", "sent_at")
